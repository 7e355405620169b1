//! `hash`: a key template hashed onto the servers, plain (nginx's weighted walk with its rehash
//! loop) or `consistent` (nginx's ketama ring).
//!
//! Both reproduce `ngx_http_upstream_hash_module.c` bit for bit, so a fleet moving from nginx or
//! Angie keeps every key on the same server:
//!
//! - **plain**: `h = (crc32(KEY) >> 16) & 0x7fff` added to a running sum, the sum modulo the
//!   total weight walked across the servers' weight segments (config order, `down` servers
//!   included — they keep their segment). A server that cannot be used starts another round
//!   with the decimal round number prefixed to the key (`crc32("1" KEY)`, `crc32("2" KEY)`...,
//!   Cache::Memcached's rehash), 21 rounds at most, then the rotation.
//! - **consistent**: each server contributes `160 × weight` points. They are derived from the
//!   server's *name* as written (`Address::text`), split at the last `:` followed by digits into
//!   host and port: the base is `crc32(HOST "\0" PORT ...)`, each point extends the base with the
//!   previous point as four little-endian bytes (`prev` starting at 0). Points are sorted (equal
//!   values keep the first), a key goes to the first point `>= crc32(KEY)` (wrapping), and an
//!   unusable server passes the key to the next point, 21 points at most, then the rotation.
//!   Endpoints that share a name share its points (identical values collapse) and take turns
//!   by weighted rotation, which is how several addresses of one DNS name behave in nginx.
//!
//! Removing a server from the ring remaps only the keys on its arcs; `down` keeps a server's
//! points, so its keys move to the neighbours while it is down and come back afterwards.

use super::crc32::Crc32;
use super::key::{CompiledKey, decimal};
use super::rng::Rng;
use super::round_robin::smooth_weighted;
use super::{Ctx, RequestKey, Select, Tier, View, weight_shares};
use crate::config::{Endpoint, KeyTemplate};

/// Points per unit of weight on the ring (nginx's constant).
const POINTS_PER_WEIGHT: u32 = 160;
/// Rounds/points tried before the rotation (nginx: `tries > 20`).
const TRIES: u32 = 21;

/// Plain `hash`.
#[derive(Debug)]
pub(crate) struct Hash {
    key: CompiledKey,
}

impl Hash {
    pub(crate) fn new(key: &KeyTemplate) -> Self {
        Hash {
            key: CompiledKey::new(key),
        }
    }
}

impl Select for Hash {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        request: &K,
        tier: &Tier,
        primary: bool,
    ) -> Option<usize> {
        if primary
            && tier.members.len() >= 2
            && let Some(i) = self.walk(request, tier, |_, _, _, i| ctx.take(i))
        {
            return Some(i);
        }
        tier.rotation.pick(ctx, &tier.members)
    }
}

impl Hash {
    /// nginx's walk for `request`'s key over `tier`'s weight segments: each round hashes the
    /// key (round r > 0 with the decimal r prefixed), adds `(h >> 16) & 0x7fff` to the running
    /// sum and lands on the member whose segment holds `sum % total`; `visit(round, h, slot,
    /// endpoint)` says whether that endpoint takes it. The endpoint taken, or `None` (an empty
    /// key, or 21 rounds without one: the rotation's turn). The pick and its explanation
    /// ([`super::trace`]) both walk here.
    pub(crate) fn walk<K: RequestKey + ?Sized>(
        &self,
        request: &K,
        tier: &Tier,
        mut visit: impl FnMut(u32, u32, u64, usize) -> bool,
    ) -> Option<usize> {
        let (crc, len) = self.key.crc32(request);
        if len == 0 {
            return None;
        }
        let mut sum: u32 = 0;
        let mut buf = [0u8; 10];
        for round in 0..TRIES {
            let h = if round == 0 {
                crc
            } else {
                self.key
                    .crc32_with_prefix(decimal(round, &mut buf), request)
            };
            sum = sum.wrapping_add((h >> 16) & 0x7fff);
            let slot = u64::from(sum) % tier.ranges.total();
            let i = tier.members[tier.ranges.locate(slot)] as usize;
            if visit(round, h, slot, i) {
                return Some(i);
            }
        }
        None
    }

    /// The key template, compiled.
    pub(crate) fn key(&self) -> &CompiledKey {
        &self.key
    }
}

/// `hash ... consistent`: the ketama ring.
#[derive(Debug)]
pub(crate) struct Ketama {
    key: CompiledKey,
    /// Point values, ascending and distinct.
    points: Box<[u32]>,
    /// Name id owning each point.
    owner: Box<[u32]>,
    /// Endpoint indexes grouped by name id: name `n` owns `members[starts[n]..starts[n + 1]]`.
    members: Box<[u32]>,
    starts: Box<[u32]>,
}

/// Splits a server name into host and port as nginx does for ketama points: the part after the
/// last `:` when it is all digits; `unix:` paths have no port.
pub(crate) fn host_and_port(name: &str) -> (&[u8], &[u8]) {
    let b = name.as_bytes();
    if b.len() >= 5 && b[..5].eq_ignore_ascii_case(b"unix:") {
        return (&b[5..], b"");
    }
    for j in 0..b.len() {
        let c = b[b.len() - j - 1];
        if c == b':' {
            return (&b[..b.len() - j - 1], &b[b.len() - j..]);
        }
        if !c.is_ascii_digit() {
            break;
        }
    }
    (b, b"")
}

/// The `count` ketama point values of a server name.
pub(crate) fn server_points(name: &str, count: u32) -> impl Iterator<Item = u32> {
    let (host, port) = host_and_port(name);
    let mut base = Crc32::new();
    base.update(host);
    base.update(b"\0");
    base.update(port);
    let mut prev: u32 = 0;
    (0..count).map(move |_| {
        let mut c = base;
        c.update(&prev.to_le_bytes());
        prev = c.finish();
        prev
    })
}

impl Ketama {
    pub(crate) fn new(key: &KeyTemplate, configs: &[Endpoint], primaries: &Tier) -> Self {
        let mut names: Vec<&str> = Vec::new();
        let mut name_of = Vec::with_capacity(primaries.members.len());
        for &m in primaries.members.iter() {
            let text = configs[m as usize].address.text.as_str();
            let id = names.iter().position(|&n| n == text).unwrap_or_else(|| {
                names.push(text);
                names.len() - 1
            });
            name_of.push(id as u32);
        }
        let mut members = Vec::with_capacity(primaries.members.len());
        let mut starts = Vec::with_capacity(names.len() + 1);
        for id in 0..names.len() as u32 {
            starts.push(members.len() as u32);
            members.extend(
                primaries
                    .members
                    .iter()
                    .zip(&name_of)
                    .filter(|&(_, &n)| n == id)
                    .map(|(&m, _)| m),
            );
        }
        starts.push(members.len() as u32);

        let total: u64 = primaries
            .members
            .iter()
            .map(|&m| u64::from(configs[m as usize].weight))
            .sum();
        let mut points: Vec<(u32, u32)> =
            Vec::with_capacity((total * u64::from(POINTS_PER_WEIGHT)) as usize);
        for (&m, &id) in primaries.members.iter().zip(&name_of) {
            let c = &configs[m as usize];
            points.extend(
                server_points(&c.address.text, c.weight.saturating_mul(POINTS_PER_WEIGHT))
                    .map(|h| (h, id)),
            );
        }
        // Stable sort, then keep the first of equal values (glibc's merge-sorting qsort, as
        // nginx runs on Debian, behaves the same; collisions are rare either way).
        points.sort_by_key(|&(h, _)| h);
        points.dedup_by_key(|&mut (h, _)| h);
        Ketama {
            key: CompiledKey::new(key),
            points: points.iter().map(|&(h, _)| h).collect(),
            owner: points.iter().map(|&(_, n)| n).collect(),
            members: members.into_boxed_slice(),
            starts: starts.into_boxed_slice(),
        }
    }

    fn name_members(&self, name: u32) -> &[u32] {
        let n = name as usize;
        &self.members[self.starts[n] as usize..self.starts[n + 1] as usize]
    }

    /// The ring's walk for a key hashing to `crc`: from the first point `>= crc` (wrapping),
    /// `visit(try, point, members)` is asked of each point in turn with the endpoints of the
    /// name that owns it, 21 points at most; the endpoint it returns, or `None` (the rotation's
    /// turn). The pick and its explanation ([`super::trace`]) both walk here.
    pub(crate) fn walk(
        &self,
        crc: u32,
        mut visit: impl FnMut(u32, usize, &[u32]) -> Option<usize>,
    ) -> Option<usize> {
        let start = self.find(crc);
        for tries in 0..TRIES {
            let k = (start + tries as usize) % self.points.len();
            if let Some(i) = visit(tries, k, self.name_members(self.owner[k])) {
                return Some(i);
            }
        }
        None
    }

    /// The value of point `k`.
    pub(crate) fn point(&self, k: usize) -> u32 {
        self.points[k]
    }

    /// Points on the ring.
    pub(crate) fn points(&self) -> usize {
        self.points.len()
    }

    /// The key template, compiled.
    pub(crate) fn key(&self) -> &CompiledKey {
        &self.key
    }

    /// Index of the first point `>= hash` (may be `len`, which wraps to 0).
    fn find(&self, hash: u32) -> usize {
        self.points.partition_point(|&p| p < hash)
    }

    /// The endpoints of the name at point `k` that could take `hash`, by weight, into `out`;
    /// false if none is usable.
    fn arc_owner_shares(&self, view: &View<'_>, k: usize, arc: f64, out: &mut [f64]) -> bool {
        let members = self.name_members(self.owner[k % self.points.len()]);
        let weight: f64 = members
            .iter()
            .filter(|&&m| view.counts(m as usize))
            .map(|&m| f64::from(view.endpoints[m as usize].config().weight))
            .sum();
        if weight <= 0.0 {
            return false;
        }
        for &m in members {
            let e = &view.endpoints[m as usize];
            if view.counts(m as usize) {
                out[m as usize] += arc * f64::from(e.config().weight) / weight;
            }
        }
        true
    }
}

impl Select for Ketama {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        request: &K,
        tier: &Tier,
        primary: bool,
    ) -> Option<usize> {
        if primary && tier.members.len() >= 2 && !self.points.is_empty() {
            let (crc, len) = self.key.crc32(request);
            if len > 0
                && let Some(i) = self.walk(crc, |_, _, members| {
                    let chosen = if let [only] = members {
                        let i = *only as usize;
                        ctx.candidate(i).then(|| {
                            ctx.ep(i).restore_one();
                            i
                        })
                    } else {
                        smooth_weighted(ctx, members, |ctx, i| ctx.candidate(i))
                    };
                    chosen.filter(|&i| ctx.acquire(i))
                })
            {
                return Some(i);
            }
        }
        tier.rotation.pick(ctx, &tier.members)
    }

    /// The key space each endpoint answers for: every arc of the ring goes to the first usable
    /// name at or after its point (within nginx's 21 tries), split among that name's usable
    /// endpoints by weight; arcs with no usable name within reach follow the rotation.
    fn shares(&self, view: &View<'_>, tier: &Tier, primary: bool, out: &mut [f64]) -> bool {
        let n = self.points.len();
        if !primary || tier.members.len() < 2 || n == 0 {
            weight_shares(view, tier, false, out);
            return true;
        }
        let mut fallback = 0.0;
        for k in 0..n {
            let arc = if k == 0 {
                f64::from(self.points[0]) + 1.0 + f64::from(u32::MAX - self.points[n - 1])
            } else {
                f64::from(self.points[k] - self.points[k - 1])
            };
            if !(0..TRIES as usize).any(|tries| self.arc_owner_shares(view, k + tries, arc, out)) {
                fallback += arc;
            }
        }
        if fallback > 0.0 {
            let mut weights = vec![0.0; out.len()];
            weight_shares(view, tier, false, &mut weights);
            let total: f64 = weights.iter().sum();
            if total > 0.0 {
                for (o, w) in out.iter_mut().zip(weights) {
                    *o += fallback * w / total;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_like_nginx() {
        assert_eq!(
            host_and_port("127.0.0.1:8080"),
            (&b"127.0.0.1"[..], &b"8080"[..])
        );
        assert_eq!(
            host_and_port("backend.example.com"),
            (&b"backend.example.com"[..], &b""[..])
        );
        assert_eq!(host_and_port("[::1]:80"), (&b"[::1]"[..], &b"80"[..]));
        assert_eq!(host_and_port("[::1]"), (&b"[::1]"[..], &b""[..]));
        assert_eq!(host_and_port("unix:/tmp/s"), (&b"/tmp/s"[..], &b""[..]));
        assert_eq!(host_and_port("a:"), (&b"a"[..], &b""[..]));
    }

    #[test]
    fn first_point_is_crc_of_host_nul_port_and_zero() {
        let first = server_points("10.0.0.1:80", 1).next().unwrap();
        assert_eq!(first, super::super::crc32::crc32(b"10.0.0.1\x0080\0\0\0\0"));
        let two: Vec<u32> = server_points("10.0.0.1:80", 2).collect();
        let mut expect = b"10.0.0.1\x0080".to_vec();
        expect.extend_from_slice(&two[0].to_le_bytes());
        assert_eq!(two[1], super::super::crc32::crc32(&expect));
    }
}
