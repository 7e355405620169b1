//! Why a pick lands where it does (`GET /explain`, `sim --client`): the walks the methods take
//! — plain `hash`'s rounds, the ketama ring's points, `ip_hash`'s rounds — run by the same
//! functions the pick calls ([`super::hash::Hash::walk`], [`super::hash::Ketama::walk`],
//! [`super::ip_hash::walk`]), asking at each step whether the endpoint could be chosen instead
//! of acquiring it. Nothing is counted, no rotation advances, no probe is claimed: asking does
//! not move the node. Off the pick path (it allocates: the key's text and the steps).

use std::time::Instant;

use super::key::client_ip;
use super::rng::SplitMix64;
use super::{Admit, Ctx, GroupBalancer, Method, RequestKey, Tier, ip_hash};

/// Why a group's pick goes where it goes, for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct PickTrace {
    /// The method's config name.
    pub method: &'static str,
    /// No primary could serve: the backups are picked from (by weighted rotation).
    pub backup: bool,
    /// What decides.
    pub walk: Walk,
    /// The endpoint (config index) the request itself decides, when it does: the first usable
    /// one of a hash walk. `None` when the rotation, chance or load decides, or nothing is
    /// usable.
    pub endpoint: Option<usize>,
    /// Each endpoint's expected part of the group's picks (config order, fractions summing to
    /// 1); `None` when load-dependent ([`GroupBalancer::expected_shares`]).
    pub shares: Option<Vec<f64>>,
    /// Endpoints the pick may choose now (config order): usable under the plan's admission and
    /// below `max_conns`.
    pub candidates: Vec<bool>,
}

/// What decides a pick.
#[derive(Debug, Clone, PartialEq)]
pub enum Walk {
    /// The smooth weighted rotation (`round_robin`, and where a method falls back to it): the
    /// endpoint depends on the picks before, each endpoint gets its weight's part.
    Rotation {
        /// Why the rotation and not the method's own walk (`None`: the method is the rotation).
        because: Option<&'static str>,
    },
    /// `random`: a weighted draw (`two`: two draws, the less loaded one).
    Random {
        /// `two = true`.
        two: bool,
    },
    /// `least_conn`, `least_time`, `feedback`: the endpoints' load now decides.
    Load,
    /// A hash walk that named an endpoint.
    Hash(HashWalk),
    /// A hash walk that found no usable endpoint: the rotation picks.
    HashThenRotation(HashWalk),
}

/// The steps of a hash walk.
#[derive(Debug, Clone, PartialEq)]
pub struct HashWalk {
    /// `hash`, `hash consistent` or `ip_hash`.
    pub kind: &'static str,
    /// The key hashed: the template rendered for the request (`hash`), or the client address
    /// octets `ip_hash` reads (`10.1.2`).
    pub key: String,
    /// `hash`: the CRC-32 of the key. `ip_hash`: the first round's value.
    pub hash: u32,
    /// Plain `hash` and `ip_hash`: the total weight the slot is taken modulo; ketama: the
    /// points on the ring.
    pub space: u64,
    /// Every step walked, up to the one taken.
    pub steps: Vec<HashStep>,
}

/// One step of a hash walk.
#[derive(Debug, Clone, PartialEq)]
pub struct HashStep {
    /// The round (plain `hash`, `ip_hash`) or the point tried (ketama), from 0.
    pub round: u32,
    /// Plain `hash`: the round's CRC-32; `ip_hash`: the round's value; ketama: the point's
    /// value on the ring.
    pub hash: u32,
    /// Plain `hash` and `ip_hash`: the position in the weight space (`sum % total`, `h %
    /// total`); ketama: the point's index on the ring.
    pub slot: u64,
    /// The endpoint (config index) the step landed on (ketama: the endpoint chosen among
    /// the point's name, or its first one when none could take it).
    pub endpoint: usize,
    /// That endpoint could take the request.
    pub usable: bool,
}

impl GroupBalancer {
    /// Why a pick for `request` under `admit` at `now` goes where it goes, without picking.
    pub fn trace<K: RequestKey + ?Sized>(
        &self,
        request: &K,
        admit: Admit,
        now: Instant,
    ) -> PickTrace {
        let mut rng = SplitMix64::new(0);
        let ctx = Ctx {
            endpoints: &self.endpoints,
            cw: &self.cw,
            t: self.full.hub.nanos(now),
            exclude: &[],
            ignore_health: admit == Admit::IgnoringHealth,
            rng: &mut rng,
            full: &self.full,
        };
        let candidates: Vec<bool> = (0..self.endpoints.len())
            .map(|i| ctx.candidate(i))
            .collect();
        let any = |tier: &Tier| tier.members.iter().any(|&m| candidates[m as usize]);
        let (tier, backup) = if any(&self.primary) {
            (Some(&self.primary), false)
        } else if any(&self.backup) {
            (Some(&self.backup), true)
        } else {
            (None, false)
        };
        let shares = self.expected_shares_admitting(now, admit);
        let method = self.method_name();
        let (walk, endpoint) = match (&self.method, tier) {
            // Backups, and a group where nothing can serve: the rotation's turn.
            (_, None) => (
                Walk::Rotation {
                    because: Some("no endpoint can take it"),
                },
                None,
            ),
            (Method::Hash(_) | Method::Ketama(_) | Method::IpHash(_), Some(_)) if backup => (
                Walk::Rotation {
                    because: Some("no primary can serve: the backups take turns"),
                },
                None,
            ),
            (Method::Hash(_) | Method::Ketama(_) | Method::IpHash(_), Some(t))
                if t.members.len() < 2 =>
            {
                (
                    Walk::Rotation {
                        because: Some("fewer than two servers: nothing to hash between"),
                    },
                    None,
                )
            }
            (Method::Hash(h), Some(t)) => {
                let key = h.key().render(request);
                let (crc, _) = h.key().crc32(request);
                let mut steps = Vec::new();
                let found = h.walk(request, t, |round, hash, slot, i| {
                    let usable = ctx.candidate(i);
                    steps.push(HashStep {
                        round,
                        hash,
                        slot,
                        endpoint: i,
                        usable,
                    });
                    usable
                });
                hashed("hash", key, crc, t.ranges.total(), steps, found)
            }
            (Method::Ketama(k), Some(_)) if k.points() == 0 => (
                Walk::Rotation {
                    because: Some("the ring has no points"),
                },
                None,
            ),
            (Method::Ketama(k), Some(_)) => {
                let key = k.key().render(request);
                let (crc, _) = k.key().crc32(request);
                let mut steps = Vec::new();
                let found = if key.is_empty() {
                    None
                } else {
                    k.walk(crc, |round, point, members| {
                        // A name with several endpoints: they take turns by weighted rotation;
                        // the explanation names the first usable one.
                        let usable = members
                            .iter()
                            .map(|&m| m as usize)
                            .find(|&i| ctx.candidate(i));
                        steps.push(HashStep {
                            round,
                            hash: k.point(point),
                            slot: point as u64,
                            endpoint: usable.unwrap_or(members[0] as usize),
                            usable: usable.is_some(),
                        });
                        usable
                    })
                };
                hashed("hash consistent", key, crc, k.points() as u64, steps, found)
            }
            (Method::IpHash(_), Some(t)) => {
                let ip = client_ip(request);
                let (bytes, len) = ip_hash::key_bytes(ip);
                let key = if len == 3 {
                    format!("{}.{}.{}", bytes[0], bytes[1], bytes[2])
                } else {
                    ip.to_string()
                };
                let mut steps = Vec::new();
                let found = ip_hash::walk(ip, t, |round, hash, slot, i| {
                    let usable = ctx.candidate(i);
                    steps.push(HashStep {
                        round,
                        hash,
                        slot,
                        endpoint: i,
                        usable,
                    });
                    usable
                });
                let first = steps.first().map_or(0, |s| s.hash);
                hashed("ip_hash", key, first, t.ranges.total(), steps, found)
            }
            (Method::Random(r), Some(_)) if !backup => (Walk::Random { two: r.two }, None),
            (Method::LeastConn(_) | Method::LeastTime(_) | Method::Feedback(_), Some(_)) => {
                (Walk::Load, None)
            }
            (Method::RoundRobin(_), Some(_)) => (Walk::Rotation { because: None }, None),
            (Method::Random(_), Some(_)) => (
                Walk::Rotation {
                    because: Some("no primary can serve: the backups take turns"),
                },
                None,
            ),
        };
        PickTrace {
            method,
            backup,
            walk,
            endpoint,
            shares,
            candidates,
        }
    }
}

/// A hash walk's outcome: the endpoint it named, or the rotation after it.
fn hashed(
    kind: &'static str,
    key: String,
    hash: u32,
    space: u64,
    steps: Vec<HashStep>,
    found: Option<usize>,
) -> (Walk, Option<usize>) {
    let walk = HashWalk {
        kind,
        key,
        hash,
        space,
        steps,
    };
    match found {
        Some(i) => (Walk::Hash(walk), Some(i)),
        None => (Walk::HashThenRotation(walk), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::StaticRequest;
    use crate::balance::testutil::{group, weighted};
    use crate::config::{Balance, KeyPart, KeyTemplate, Protocol};

    fn keyed(consistent: bool) -> Balance {
        Balance::Hash {
            key: KeyTemplate {
                text: "$request_uri".into(),
                parts: vec![KeyPart::RequestUri],
            },
            consistent,
        }
    }

    /// The trace names the endpoint the pick then takes, for every hash method and many keys,
    /// and asking moves nothing (no active count).
    #[test]
    fn the_trace_names_what_the_pick_takes() {
        let now = Instant::now();
        for balance in [keyed(false), keyed(true), Balance::IpHash] {
            let g = group(balance, weighted(&[1, 2, 3, 4]));
            let b = GroupBalancer::new(&g, Protocol::Http, now);
            b.endpoints()[1].set_enabled(false, now);
            for n in 0..200_u32 {
                let req = StaticRequest::from_ip(format!("10.{}.{}.7", n % 7, n).parse().unwrap())
                    .with_uri(format!("/k/{n}"));
                let t = b.trace(&req, Admit::Usable, now);
                assert!(b.endpoints().iter().all(|e| e.active() == 0));
                let picked = b.pick(&req, now).expect("a pick").index();
                assert_eq!(t.endpoint, Some(picked), "{:?}", t.walk);
                let Walk::Hash(w) = &t.walk else {
                    panic!("{:?}", t.walk)
                };
                let last = w.steps.last().unwrap();
                assert!(last.usable && last.endpoint == picked);
                assert!(w.steps[..w.steps.len() - 1].iter().all(|s| !s.usable));
            }
        }
    }

    #[test]
    fn an_empty_key_and_the_other_methods_say_what_decides() {
        let now = Instant::now();
        let g = group(keyed(false), weighted(&[1, 1]));
        let b = GroupBalancer::new(&g, Protocol::Http, now);
        let t = b.trace(
            &StaticRequest::from_ip("10.0.0.9".parse().unwrap()),
            Admit::Usable,
            now,
        );
        assert!(
            matches!(&t.walk, Walk::HashThenRotation(w) if w.key.is_empty() && w.steps.is_empty())
        );
        assert_eq!(t.endpoint, None);
        for (balance, walk) in [
            (Balance::RoundRobin, Walk::Rotation { because: None }),
            (Balance::LeastConn, Walk::Load),
            (Balance::Random { two: true }, Walk::Random { two: true }),
        ] {
            let g = group(balance, weighted(&[2, 1]));
            let b = GroupBalancer::new(&g, Protocol::Http, now);
            let t = b.trace(
                &StaticRequest::from_ip("10.0.0.9".parse().unwrap()),
                Admit::Usable,
                now,
            );
            assert_eq!(t.walk, walk);
            assert_eq!(t.candidates, [true, true]);
        }
    }
}
