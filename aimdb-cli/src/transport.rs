//! The transport to a node: a framed byte stream (TCP, serial) or an
//! MQTT broker, each reduced to a pair of channels carrying
//! `(topic, payload)` messages, and the request/response [`Client`] on
//! top of them.

use std::time::Duration;

use aimdb_connectors::framed::frame::{self, Decoder, Event};
use aimdb_core::remote::proto::{self, Body, Host, Response};
use aimdb_core::remote::{Op, Request, RequestError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::Fail;

/// One message: topic and payload.
pub type Msg = (String, Vec<u8>);

/// How often the framed transport sends a keep-alive (the firmware drops
/// a connection silent for 3 s; its own interval is 1 s).
const KEEP_ALIVE: Duration = Duration::from_millis(500);

/// Largest frame we decode (answers are bounded by the node's buffers,
/// far below this).
const RX_FRAME: usize = 64 * 1024;

/// An open connection: messages out, messages in.
pub struct Conn {
    pub out: mpsc::Sender<Msg>,
    pub inc: mpsc::Receiver<Msg>,
}

/// Connects to `addr` (TCP, framed).
pub async fn tcp(addr: &str, timeout: Duration) -> Result<Conn, Fail> {
    let stream = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Fail::Unreachable(format!("connect {addr}: {e}"))),
        Err(_) => return Err(Fail::Unreachable(format!("connect {addr}: timed out"))),
    };
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    Ok(framed(r, w))
}

/// Opens a serial device (or pty) read/write, framed. Line settings
/// (baud rate, raw mode) are the user's (`stty`).
pub async fn serial(path: &str) -> Result<Conn, Fail> {
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .await
        .map_err(|e| Fail::Unreachable(format!("open {path}: {e}")))?;
    let (r, w) = tokio::io::split(file);
    Ok(framed(r, w))
}

/// Runs the framed codec over a byte stream: a writer task (requests and
/// keep-alives) and a reader task (frames in, keep-alives dropped).
fn framed<R, W>(mut r: R, mut w: W) -> Conn
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, mut out_rx) = mpsc::channel::<Msg>(16);
    let (in_tx, in_rx) = mpsc::channel::<Msg>(64);

    // Our birth sequence, as a keep-alive carries it: a new one per run.
    let seq = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(KEEP_ALIVE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let keep_alive = postcard::to_stdvec(&seq).expect("varint");
        loop {
            let bytes = tokio::select! {
                m = out_rx.recv() => match m {
                    Some((topic, payload)) => encode(&topic, &payload),
                    None => break,
                },
                // The first tick is at once: the hello.
                _ = tick.tick() => encode("", &keep_alive),
            };
            if w.write_all(&bytes).await.is_err() || w.flush().await.is_err() {
                break;
            }
        }
    });

    tokio::spawn(async move {
        let mut decoder = Box::new(Decoder::<RX_FRAME>::new());
        let mut buf = vec![0u8; 4096];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                let (msg, used) = match decoder.push(rest) {
                    Event::NeedMore => break,
                    Event::Frame(f, used) => {
                        // An empty topic is a keep-alive: absorbed.
                        let msg = (!f.topic.is_empty()).then(|| {
                            (
                                String::from_utf8_lossy(f.topic).into_owned(),
                                f.payload.to_vec(),
                            )
                        });
                        (msg, used)
                    }
                    Event::Error(_, used) => (None, used),
                };
                rest = &rest[used..];
                if let Some(m) = msg {
                    if in_tx.send(m).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Conn {
        out: out_tx,
        inc: in_rx,
    }
}

fn encode(topic: &str, payload: &[u8]) -> Vec<u8> {
    // postcard length prefixes: at most 5 bytes each.
    let mut out = vec![0u8; frame::encoded_len(topic.len() + payload.len() + 10)];
    let n = frame::encode(topic, payload, &mut out).expect("sized by encoded_len");
    out.truncate(n);
    out
}

/// MQTT connection settings.
pub struct MqttArgs<'a> {
    pub url: &'a str,
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
    pub tls_ca: Option<&'a std::path::Path>,
    /// Client certificate and key (PEM files), presented in the TLS
    /// handshake.
    pub tls_cert: Option<&'a std::path::Path>,
    pub tls_key: Option<&'a std::path::Path>,
}

/// A PEM file's bytes; `flag` names it in the error.
fn pem(flag: &str, p: &std::path::Path) -> Result<Vec<u8>, Fail> {
    std::fs::read(p).map_err(|e| Fail::Usage(format!("{flag} {}: {e}", p.display())))
}

/// Connects to the broker and subscribes to `topics` (waits for the
/// broker's acknowledgements, so no answer is missed).
pub async fn mqtt(args: &MqttArgs<'_>, topics: &[String], timeout: Duration) -> Result<Conn, Fail> {
    use rumqttc::{
        AsyncClient, Event, MqttOptions, Packet, QoS, SubscribeReasonCode, TlsConfiguration,
        Transport,
    };

    let (tls, rest) = if let Some(r) = args.url.strip_prefix("mqtts://") {
        (true, r)
    } else if let Some(r) = args.url.strip_prefix("mqtt://") {
        (args.tls_ca.is_some(), r)
    } else {
        return Err(Fail::Usage(format!(
            "--mqtt {}: expected mqtt://HOST:PORT or mqtts://HOST:PORT",
            args.url
        )));
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| Fail::Usage(format!("--mqtt {}: bad port", args.url)))?,
        ),
        None => (rest, if tls { 8883 } else { 1883 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let id = format!("aimdb-cli-{}", std::process::id());
    let mut opts = MqttOptions::new(id, host, port);
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_clean_session(true);
    opts.set_max_packet_size(256 * 1024, 256 * 1024);
    if let Some(u) = args.username {
        opts.set_credentials(u, args.password.unwrap_or(""));
    }
    if tls {
        let ca = match args.tls_ca {
            Some(p) => pem("--tls-ca", p)?,
            None => {
                return Err(Fail::Usage(
                    "mqtts:// needs --tls-ca PEM (the broker's CA)".into(),
                ))
            }
        };
        let client_auth = match (args.tls_cert, args.tls_key) {
            (Some(c), Some(k)) => Some((pem("--tls-cert", c)?, pem("--tls-key", k)?)),
            _ => None,
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        opts.set_transport(Transport::Tls(TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth,
        }));
    }
    let (client, mut ev) = AsyncClient::new(opts, 64);
    let (in_tx, in_rx) = mpsc::channel::<Msg>(1024);

    let setup = async {
        // Until the broker accepts the connection.
        loop {
            match ev.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => break,
                Ok(_) => {}
                Err(e) => return Err(Fail::Unreachable(format!("mqtt {}: {e}", args.url))),
            }
        }
        for t in topics {
            client
                .subscribe(t.as_str(), QoS::AtLeastOnce)
                .await
                .map_err(|e| Fail::Unreachable(format!("mqtt subscribe {t}: {e}")))?;
        }
        let mut acked = 0;
        while acked < topics.len() {
            match ev.poll().await {
                // One SUBSCRIBE per topic, acknowledged in order.
                Ok(Event::Incoming(Packet::SubAck(a))) => {
                    if a.return_codes.contains(&SubscribeReasonCode::Failure) {
                        return Err(Fail::NotAllowed(format!(
                            "mqtt {}: the broker refused the subscription to {} \
                             (its ACL does not let this client read it)",
                            args.url, topics[acked]
                        )));
                    }
                    acked += 1;
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = in_tx.try_send((p.topic, p.payload.to_vec()));
                }
                Ok(_) => {}
                Err(e) => return Err(Fail::Unreachable(format!("mqtt {}: {e}", args.url))),
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, setup).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Fail::Unreachable(format!(
                "mqtt {}: no answer from the broker",
                args.url
            )))
        }
    }

    tokio::spawn(async move {
        loop {
            match ev.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if in_tx.send((p.topic, p.payload.to_vec())).await.is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let (out_tx, mut out_rx) = mpsc::channel::<Msg>(16);
    tokio::spawn(async move {
        while let Some((topic, payload)) = out_rx.recv().await {
            if client
                .publish(topic, QoS::AtLeastOnce, false, payload)
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Ok(Conn {
        out: out_tx,
        inc: in_rx,
    })
}

/// One answer from the node: the id it carries, and its bytes (the body
/// borrows from them: [`Self::body`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub id: u32,
    bytes: Vec<u8>,
}

impl Reply {
    /// An answer's bytes, if they decode.
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        let id = postcard::from_bytes::<Response<Body<'_, Host>>>(&bytes)
            .ok()?
            .id;
        Some(Self { id, bytes })
    }

    /// The node's answer; its errors as [`Fail::Node`].
    pub fn body(&self) -> Result<Body<'_, Host>, Fail> {
        let r: Response<Body<'_, Host>> = postcard::from_bytes(&self.bytes)
            .map_err(|e| Fail::Other(format!("answer does not decode: {e}")))?;
        r.result.map_err(Fail::Node)
    }
}

/// Requests and answers over a [`Conn`]: one at a time with [`Self::call`],
/// or as a stream with [`Self::send`] and [`Self::recv`] (a watch's
/// updates come under its request's id). On a broker, requests can go to
/// any node ([`Self::send_to`]) and every message can be read
/// ([`Self::message`]).
pub struct Client {
    conn: Conn,
    req: String,
    rsp: String,
    next_id: u32,
    timeout: Duration,
}

impl Client {
    /// A client of the node at MQTT topic prefix `node`, or (`None`) of
    /// the node at the other end of a framed transport.
    pub fn new(conn: Conn, node: Option<&str>, timeout: Duration) -> Self {
        let (req, rsp) = match node {
            Some(p) => (
                proto::topic(p, proto::REQUEST),
                proto::topic(p, proto::RESPONSE),
            ),
            None => (proto::REQUEST.into(), proto::RESPONSE.into()),
        };
        // Ids start somewhere new each run, so a late answer to an earlier
        // run's request is not taken for ours.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos())
            ^ std::process::id().rotate_left(16);
        Self {
            conn,
            req,
            rsp,
            next_id: seed | 1,
            timeout,
        }
    }

    fn fresh_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// Sends `op` under a fresh id and returns the id, without waiting for
    /// an answer.
    pub async fn send(&mut self, op: Op<'_>) -> Result<u32, Fail> {
        let req = self.req.clone();
        self.send_to(req, op).await
    }

    /// Sends `op` on request topic `topic` (another node's) under a fresh
    /// id and returns the id.
    pub async fn send_to(&mut self, topic: String, op: Op<'_>) -> Result<u32, Fail> {
        let id = self.fresh_id();
        let bytes = postcard::to_stdvec(&Request { id, op })
            .map_err(|e| Fail::Other(format!("encode request: {e}")))?;
        if self.conn.out.send((topic, bytes)).await.is_err() {
            return Err(Fail::Unreachable("connection closed".into()));
        }
        Ok(id)
    }

    /// The next message on any topic; `None` once `deadline` has passed.
    /// Cancel-safe.
    pub async fn message(&mut self, deadline: tokio::time::Instant) -> Result<Option<Msg>, Fail> {
        match tokio::time::timeout_at(deadline, self.conn.inc.recv()).await {
            Err(_) => Ok(None),
            Ok(None) => Err(Fail::Unreachable("connection closed".into())),
            Ok(Some(m)) => Ok(Some(m)),
        }
    }

    /// The next answer on the response topic, whatever its id; `None` once
    /// `deadline` has passed. Messages on other topics and payloads that
    /// do not decode are skipped. Cancel-safe: a message is taken only by
    /// the call that returns it (or skips it).
    pub async fn recv(&mut self, deadline: tokio::time::Instant) -> Result<Option<Reply>, Fail> {
        loop {
            let Some(msg) = self.message(deadline).await? else {
                return Ok(None);
            };
            if msg.0 != self.rsp {
                continue;
            }
            if let Some(r) = Reply::new(msg.1) {
                return Ok(Some(r));
            }
        }
    }

    /// The answer with `id` (others are dropped); `None` once `deadline`
    /// has passed.
    pub async fn recv_id(
        &mut self,
        id: u32,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Reply>, Fail> {
        while let Some(r) = self.recv(deadline).await? {
            if r.id == id {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Sends `op` and waits for the answer with its id (others are
    /// ignored); asks once more if the node was busy. An answer that is
    /// not an error.
    pub async fn call(&mut self, op: Op<'_>) -> Result<Reply, Fail> {
        let mut retried = false;
        loop {
            let id = self.send(op.clone()).await?;
            let deadline = tokio::time::Instant::now() + self.timeout;
            let Some(reply) = self.recv_id(id, deadline).await? else {
                return Err(Fail::Timeout(format!(
                    "no answer within {:?}",
                    self.timeout
                )));
            };
            match reply.body() {
                Err(Fail::Node(RequestError::Busy)) if !retried => {
                    retried = true;
                    tokio::time::sleep(BUSY_PAUSE).await;
                }
                Err(e) => return Err(e),
                Ok(_) => return Ok(reply),
            }
        }
    }
}

/// How long to wait before asking again after a `Busy` answer.
pub const BUSY_PAUSE: Duration = Duration::from_millis(50);
