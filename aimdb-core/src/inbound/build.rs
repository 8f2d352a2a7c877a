//! Declaring a [`Dispatch`]: the [`Builder`], and the exact buckets and
//! trie nodes it fills. Everything here runs once, at start-up.

use core::fmt;

use super::{
    edge_hash, reduce, same_target, ConfigError, ConfigErrors, Counters, Dispatch, Entry,
    InboundStats, List, Node, Route, BUCKETS, NIL, NO_KEY,
};
use crate::topic::{fnv1a, topic_hash, Filter};

/// Declares the links of a [`Dispatch`]; see [`Dispatch::builder`].
pub struct Builder<'a, const N: usize, const NODES: usize, D = dyn Route + Sync + 'a>
where
    D: Route + ?Sized + 'a,
{
    table: Dispatch<'a, N, NODES, D>,
    calls: usize,
    errors: ConfigErrors<'a>,
}

/// An upper bound on the trie nodes a [`Dispatch`] needs for `filters`: its
/// `NODES` parameter. One for the root, plus one per level of each filter
/// with a wildcard (exact filters need none); filters sharing a prefix
/// need fewer. `const`, so the table can be sized from its own filters:
///
/// ```
/// use aimdb_core::inbound::{nodes_for, Dispatch};
/// const FILTERS: [&str; 3] = ["sensors/+/temp", "cmd/#", "dev/7/led"];
/// let b = Dispatch::<3, { nodes_for(&FILTERS) }>::builder();
/// # let _ = b;
/// ```
pub const fn nodes_for(filters: &[&str]) -> usize {
    let mut nodes = 1;
    let mut k = 0;
    while k < filters.len() {
        let b = filters[k].as_bytes();
        let (mut levels, mut wild, mut i) = (1, false, 0);
        while i < b.len() {
            match b[i] {
                b'/' => levels += 1,
                b'+' | b'#' => wild = true,
                _ => {}
            }
            i += 1;
        }
        if wild {
            nodes += levels;
        }
        k += 1;
    }
    nodes
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> Dispatch<'a, N, NODES, D> {
    /// Starts declaring links.
    #[allow(clippy::let_unit_value)]
    pub fn builder() -> Builder<'a, N, NODES, D> {
        let () = Self::CHECK;
        let mut nodes = heapless::Vec::new();
        // The root: the level before the first one.
        let _ = nodes.push(Node {
            level: "",
            level_hash: 0,
            parent: NIL,
            next: NIL,
            routes: NIL,
            plus: NIL,
            hash: NIL,
        });
        Builder {
            table: Dispatch {
                routes: heapless::Vec::new(),
                exact: [[NIL; BUCKETS]; N],
                nodes,
                edges: [NIL; NODES],
                stats: InboundStats::default(),
                shared: None,
            },
            calls: 0,
            errors: ConfigErrors::new(),
        }
    }
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> Builder<'a, N, NODES, D> {
    /// Links `filter` to `target`. A filter without wildcards is an exact
    /// route; one with `+` or `#` is a pattern route.
    pub fn link(&mut self, filter: &'a str, target: &'a D) -> &mut Self {
        self.add(filter, target, None)
    }

    /// Links a keyed filter: level `key_level` (counting from 0) must be
    /// `+`; its text in each topic is the key passed to `target`.
    pub fn link_keyed(&mut self, filter: &'a str, key_level: usize, target: &'a D) -> &mut Self {
        self.add(filter, target, Some(key_level))
    }

    /// Mirrors the table's [`InboundStats`] into `shared` on every dispatch, so
    /// other tasks or threads can read them while a connector owns the
    /// table.
    pub fn counters(&mut self, shared: &'a Counters) -> &mut Self {
        self.table.shared = Some(shared);
        self
    }

    /// Finishes: the table, or every configuration error at once.
    // Built once at start-up and `no_std` has no `Box`: the large error
    // (every issue, by value) is the point.
    #[allow(clippy::result_large_err)]
    pub fn build(self) -> Result<Dispatch<'a, N, NODES, D>, ConfigErrors<'a>> {
        if self.errors.total == 0 {
            Ok(self.table)
        } else {
            Err(self.errors)
        }
    }

    fn add(&mut self, filter: &'a str, target: &'a D, key: Option<usize>) -> &mut Self {
        let index = self.calls;
        self.calls += 1;
        if let Err(error) = self.try_add(filter, target, key) {
            self.errors.push(index, filter, error);
        }
        self
    }

    fn try_add(
        &mut self,
        filter: &'a str,
        target: &'a D,
        key: Option<usize>,
    ) -> Result<(), ConfigError> {
        let f = Filter::new(filter).map_err(ConfigError::InvalidFilter)?;
        if let Some(k) = key {
            match f.levels().nth(k) {
                None => return Err(ConfigError::KeyLevelOutOfRange),
                Some("+") => {}
                Some(_) => return Err(ConfigError::KeyLevelNotWildcard),
            }
        }
        if self.table.routes.is_full() {
            return Err(ConfigError::TooManyRoutes);
        }
        let hash = topic_hash(filter.as_bytes());
        let list = if f.has_wildcards() {
            List::Node(self.node_for(f)?)
        } else {
            List::Exact(reduce(hash, BUCKETS * N))
        };
        let t = &mut self.table;
        // Duplicate check and `first` flag over the routes already in this
        // bucket or on this node; remember the tail to append after it, so
        // delivery follows declaration order.
        let mut first = true;
        let mut tail = NIL;
        let mut i = t.head(list);
        while i != NIL {
            let r = &t.routes[i as usize];
            if r.filter == filter {
                if same_target(r.target, target) {
                    return Err(ConfigError::Duplicate);
                }
                first = false;
            }
            tail = i;
            i = r.next;
        }
        let id = t.routes.len() as u16;
        let route = Entry {
            filter,
            target,
            hash,
            next: NIL,
            key_level: key.map_or(NO_KEY, |k| k as u8),
            first,
        };
        t.routes
            .push(route)
            .map_err(|_| ConfigError::TooManyRoutes)?;
        if tail == NIL {
            t.set_head(list, id);
        } else {
            t.routes[tail as usize].next = id;
        }
        Ok(())
    }

    /// The trie node where `f` ends, creating the missing nodes.
    fn node_for(&mut self, f: Filter<'a>) -> Result<u16, ConfigError> {
        let t = &mut self.table;
        let mut id = 0u16;
        for level in f.levels() {
            let existing = match level {
                "+" => t.nodes[id as usize].plus,
                "#" => t.nodes[id as usize].hash,
                _ => t.child(id, level),
            };
            id = if existing != NIL {
                existing
            } else {
                t.new_node(id, level)?
            };
        }
        Ok(id)
    }
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> Dispatch<'a, N, NODES, D> {
    fn set_head(&mut self, l: List, id: u16) {
        match l {
            List::Exact(b) => self.exact[b / BUCKETS][b % BUCKETS] = id,
            List::Node(n) => self.nodes[n as usize].routes = id,
        }
    }

    fn child(&self, parent: u16, level: &str) -> u16 {
        let lh = fnv1a(level.as_bytes());
        let mut c = self.edges[reduce(edge_hash(parent, lh), NODES)];
        while c != NIL {
            let n = &self.nodes[c as usize];
            if n.parent == parent && n.level_hash == lh && n.level == level {
                return c;
            }
            c = n.next;
        }
        NIL
    }

    fn new_node(&mut self, parent: u16, level: &'a str) -> Result<u16, ConfigError> {
        let id = self.nodes.len() as u16;
        let level_hash = fnv1a(level.as_bytes());
        let bucket = reduce(edge_hash(parent, level_hash), NODES);
        let literal = level != "+" && level != "#";
        self.nodes
            .push(Node {
                level,
                level_hash,
                parent,
                next: if literal { self.edges[bucket] } else { NIL },
                routes: NIL,
                plus: NIL,
                hash: NIL,
            })
            .map_err(|_| ConfigError::TooManyNodes)?;
        let p = &mut self.nodes[parent as usize];
        match level {
            "+" => p.plus = id,
            "#" => p.hash = id,
            _ => self.edges[bucket] = id,
        }
        Ok(id)
    }
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> fmt::Debug
    for Builder<'a, N, NODES, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("table", &self.table)
            .field("errors", &self.errors.total)
            .finish()
    }
}
