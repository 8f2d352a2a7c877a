//! `aimdb nodes` through a mosquitto with a password and TLS (a CA and
//! server certificate made at run time with rcgen): the right credentials
//! and CA read the retained presence; a wrong password or an untrusted CA
//! exits 3. Skipped when mosquitto is not installed.

mod common;
#[path = "../../aimdb-connectors/tests/mosquitto/mod.rs"]
mod mosquitto;

use std::path::Path;

use common::{aimdb, expect_code, stderr, stdout};
use mosquitto::{
    ca, free_port, password_file, publish_retained, server_cert, Broker, ClientArgs, TempDir,
};
use serde_json::{json, Value};

const USER: &str = "cli";
const PASSWORD: &str = "correct horse";

fn have_mosquitto() -> bool {
    std::env::var_os("MOSQUITTO").is_some()
        || [
            "/usr/sbin/mosquitto",
            "/usr/bin/mosquitto",
            "/usr/local/sbin/mosquitto",
        ]
        .iter()
        .any(|p| Path::new(p).exists())
}

async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        aimdb(&args)
    })
    .await
    .expect("aimdb runner")
}

#[tokio::test]
async fn nodes_over_tls_with_a_password() {
    if !have_mosquitto() {
        eprintln!("mosquitto not installed: skipping the MQTT TLS test");
        return;
    }
    let dir = TempDir::new("cli-tls");
    let ca_cert = ca("aimdb cli test CA");
    let (cert, key) = server_cert(&ca_cert);
    let ca_pem = dir.write("ca.pem", ca_cert.pem());
    let cert_pem = dir.write("server.pem", cert);
    let key_pem = dir.write("server.key", key);
    let other_ca = dir.write("other.pem", ca("someone else").pem());
    let passwd = password_file(&dir, USER, PASSWORD);
    let broker = Broker::start(
        &dir,
        free_port(),
        &format!(
            "log_type all\nallow_anonymous false\npassword_file {}\ncafile {}\ncertfile {}\nkeyfile {}\n",
            passwd.display(),
            ca_pem.display(),
            cert_pem.display(),
            key_pem.display()
        ),
    );
    let clients = ClientArgs::new(&broker)
        .user(USER, PASSWORD)
        .cafile(&ca_pem);
    publish_retained(&clients, "dev/presence", br#"{"status":"online","seq":7}"#).await;

    let url = format!("mqtts://localhost:{}", broker.port);
    let args = |password: &str, ca: &Path| -> Vec<String> {
        [
            "--mqtt",
            &url,
            "--username",
            USER,
            "--password",
            password,
            "--tls-ca",
            &ca.to_string_lossy(),
            "--json",
            "nodes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    let o = run(args(PASSWORD, &ca_pem)).await;
    expect_code(&o, 0);
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        v,
        json!([{
            "node": "dev",
            "role": "node",
            "status": "online",
            "seq": 7,
            "answers": false,
            "manifest": null
        }])
    );

    let o = run(args("wrong", &ca_pem)).await;
    expect_code(&o, 3);
    let o = run(args(PASSWORD, &other_ca)).await;
    expect_code(&o, 3);
    assert!(stderr(&o).contains("aimdb: nodes: mqtt"), "{}", stderr(&o));
}
