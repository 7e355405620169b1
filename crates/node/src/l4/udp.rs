//! UDP listeners: a flow table (client address → connected upstream socket) owned by the
//! receive loop, so looking a flow up takes no lock. Each flow has a task relaying replies back
//! to the client from the listener's socket. Flows expire when idle and the table is bounded:
//! at `udp_max_flows`, or when the node runs out of open files (each flow holds a socket), the
//! least recently active flow is evicted. A flow whose endpoint becomes unusable moves to another
//! endpoint (or group) on its next datagram — but not when it is only draining: a draining
//! endpoint keeps the flows it has; while the listener is fail-open, only a flow whose endpoint
//! is disabled or `down`, or failed since the flow opened, moves. A flow is a client address
//! and the local address it wrote to (known on a wildcard listener, see [`Listen`]), which its
//! replies come from.
//!
//! Stopping (SIGTERM) drains: the flows there are carry on until they go idle or the listener's
//! `drain_timeout` ends (docs/design.md §6). Unlike a TCP listener, which closes so that the
//! kernel refuses new connections at once, the UDP socket must stay open for those flows, and
//! the kernel refuses a datagram (ICMP port unreachable) only when no socket has the port: it
//! cannot refuse one client on a shared socket. Dropping a new client's datagrams was a black
//! hole for the whole drain, so a new client is served as any other, and counted
//! (`gtd_udp_flows_draining_total`); once the last flow has gone idle the socket closes and the
//! kernel refuses what comes after.
//!
//! With the access log on, a flow's line is sent when it is dropped, with the cause its remover
//! set ([`Tracked::ending`]); a datagram for which no flow could be opened has its own line.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use gtd_core::balance::errors::ErrorKind;
use gtd_core::balance::{Admit, Pick};

use super::StreamKey;
use super::udp_socket::{Control, Listen};
use crate::Inner;
use crate::access::Handle;
use crate::access::stream::{Cause, Stream};
use crate::attempt::{Attempts, Budget};
use crate::snapshot::ListenerState;

/// Largest datagram relayed.
const MAX_DATAGRAM: usize = 64 * 1024;

/// Who a flow serves: the client, and the local address it wrote to (on a wildcard listener).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Peer {
    client: SocketAddr,
    local: Option<IpAddr>,
}

struct Flow {
    peer: Peer,
    /// Tells this flow's entries in [`Flows::order`] from a former flow's of the same peer.
    id: u64,
    upstream: Arc<UdpSocket>,
    pick: Arc<Pick>,
    /// When the flow was opened on its endpoint (fail-open keeps a flow on a marked endpoint
    /// until an attempt fails on it after this).
    opened: Instant,
    group: usize,
    /// The endpoint's index in `listener`'s group (a reload may move it).
    endpoint: usize,
    listener: Arc<ListenerState>,
    /// Last activity and bytes to the client (written by the reply task too).
    traffic: Arc<Traffic>,
    replies: JoinHandle<()>,
    /// Where its line goes when it ends (`None`: the log is off).
    log: Option<Handle>,
    /// Where `[geoip]` puts the client.
    place: Option<gtd_core::geoip::Place>,
    /// Attempts after the first to open it.
    retries: u32,
    /// Bytes from the client relayed to the endpoint.
    up: u64,
    /// Why it ends, set by whoever removes it.
    end: Cause,
}

/// What a flow's two directions both write: its last activity, ms since the loop's origin,
/// the bytes relayed to the client (one allocation per flow, as before the log counted), and
/// whether the endpoint refused a datagram (ICMP port unreachable, counted then as a connect
/// failure).
struct Traffic {
    last: AtomicU64,
    down: AtomicU64,
    refused: AtomicBool,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.replies.abort();
        // A flow that went idle (or was evicted) with the client's datagrams sent and no reply
        // ever: the endpoint's timeout, as HTTP's upstream_timeout is (a blackhole shows in the
        // error column and `gtd fleet` even when the checks only connect). A refusal was
        // counted when it came; the node's own drain or a move is not the endpoint's doing.
        if matches!(self.end, Cause::Expired | Cause::Evicted)
            && self.up > 0
            && self.traffic.down.load(Ordering::Relaxed) == 0
            && !self.traffic.refused.load(Ordering::Relaxed)
        {
            self.pick.error(ErrorKind::Timeout, Instant::now());
        }
        if let Some(log) = &self.log {
            log.send(Box::new(Stream {
                udp: true,
                client: self.peer.client,
                place: self.place,
                listener: self.listener.cfg.clone(),
                target: Some((self.group, self.endpoint)),
                retries: self.retries,
                bytes_in: self.up,
                bytes_out: self.traffic.down.load(Ordering::Relaxed),
                started: self.opened,
                ended: Instant::now(),
                cause: self.end,
            }));
        }
    }
}

/// What the flow table reads of a flow: the id it gives it, and its last activity.
pub(crate) trait Tracked {
    /// The id set by [`Flows::insert`].
    fn id(&self) -> u64;
    /// Sets the id (on insertion).
    fn set_id(&mut self, id: u64);
    /// Last activity, ms since the loop's origin.
    fn last_ms(&self) -> u64;
    /// Why the flow is being removed (for its log line).
    fn ending(&mut self, _why: Cause) {}
}

impl Tracked for Flow {
    fn id(&self) -> u64 {
        self.id
    }

    fn set_id(&mut self, id: u64) {
        self.id = id;
    }

    fn last_ms(&self) -> u64 {
        self.traffic.last.load(Ordering::Relaxed)
    }

    fn ending(&mut self, why: Cause) {
        self.end = why;
    }
}

/// The flow table, with the order in which flows are evicted: second chance, first in first
/// out. The front entry is evicted unless its flow moved since the entry was queued; then it
/// is queued again, stamped now. So the flow evicted is one idle since it was last looked at,
/// the longest so: least recently active, found in amortised constant time (the flows' last
/// activity is written by their reply tasks too, so no exact order is kept). Generic over the
/// key and the flow only so that `fuzz/` can drive it without sockets ([`crate::fuzzing`]).
pub(crate) struct Flows<K, F> {
    pub(crate) map: HashMap<K, F>,
    /// (key, flow id, ms when queued); entries of flows gone are skipped and swept.
    order: VecDeque<(K, u64, u64)>,
    next_id: u64,
}

impl<K, F> Default for Flows<K, F> {
    fn default() -> Self {
        Flows {
            map: HashMap::new(),
            order: VecDeque::new(),
            next_id: 0,
        }
    }
}

impl<K: Copy + Eq + Hash, F: Tracked> Flows<K, F> {
    pub(crate) fn insert(&mut self, peer: K, mut flow: F, now_ms: u64) {
        self.next_id += 1;
        flow.set_id(self.next_id);
        self.order.push_back((peer, self.next_id, now_ms));
        self.map.insert(peer, flow);
    }

    /// Evicts the least recently active flow; false when the table is empty.
    pub(crate) fn evict(&mut self, now_ms: u64) -> bool {
        // Each flow is requeued at most once per call, so this ends within two rounds.
        let mut budget = 2 * self.order.len() + 1;
        while let Some((peer, id, queued)) = self.order.pop_front() {
            let Some(flow) = self.map.get(&peer).filter(|f| f.id() == id) else {
                continue;
            };
            budget -= 1;
            if flow.last_ms() > queued && budget > 0 {
                self.order.push_back((peer, id, now_ms));
                continue;
            }
            if let Some(mut flow) = self.map.remove(&peer) {
                flow.ending(Cause::Evicted);
            }
            return true;
        }
        false
    }

    /// Evicts flows until fewer than `most` are left (room for one more) or none is: the
    /// number evicted.
    pub(crate) fn make_room(&mut self, most: usize, now_ms: u64) -> u64 {
        let mut evicted = 0;
        while self.map.len() >= most && self.evict(now_ms) {
            evicted += 1;
        }
        evicted
    }

    /// Drops the flows idle for `idle_ms`, and the order's entries of flows gone.
    pub(crate) fn expire(&mut self, idle_ms: u64, now_ms: u64) {
        self.map.retain(|_, f| {
            let keep = now_ms.saturating_sub(f.last_ms()) < idle_ms;
            if !keep {
                f.ending(Cause::Expired);
            }
            keep
        });
        let map = &self.map;
        self.order
            .retain(|(peer, id, _)| map.get(peer).is_some_and(|f| f.id() == *id));
    }

    /// Entries in the eviction order, those of flows gone included.
    pub(crate) fn queued(&self) -> usize {
        self.order.len()
    }

    /// Drops every flow, for `why`.
    fn clear(&mut self, why: Cause) {
        for flow in self.map.values_mut() {
            flow.ending(why);
        }
        self.map.clear();
        self.order.clear();
    }
}

fn ms_since(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

/// Receives on `socket` until `stop`, relaying datagrams through per-client flows.
pub(crate) async fn udp_loop(
    node: Arc<Inner>,
    socket: Arc<Listen>,
    port: u16,
    stop: CancellationToken,
) {
    let origin = Instant::now();
    let mut flows: Flows<Peer, Flow> = Flows::default();
    let mut buf = vec![0_u8; MAX_DATAGRAM];
    let mut control: Control = [0; 128];
    let mut sweep = tokio::time::interval(Duration::from_millis(250));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The node's shutdown waits for this loop's drain as for a connection (taken now: one taken
    // when `stop` fires could come after the shutdown found nothing to wait for).
    let _drain = node.tracker.token();
    // Set once `stop` fires: when the drain ends.
    let mut draining: Option<Instant> = None;
    let end = loop {
        let received = tokio::select! {
            () = stop.cancelled(), if draining.is_none() => {
                let Some(until) = drain_until(&node, port) else { break Cause::ListenerRemoved };
                tracing::debug!(port, flows = flows.map.len(), "udp listener draining its flows");
                draining = Some(until);
                continue;
            }
            () = node.drained.cancelled() => break Cause::DrainTimeout,
            _ = sweep.tick() => {
                expire(&node, port, &mut flows, origin);
                if let Some(l) = node.snapshot.load().listener_on(port, true) {
                    l.metrics.udp_kernel_drops.absolute(socket.dropped());
                }
                if draining.is_some_and(|until| flows.map.is_empty() || Instant::now() >= until) {
                    break Cause::DrainTimeout;
                }
                continue;
            }
            r = socket.recv(&mut buf, &mut control) => r,
        };
        let (n, peer) = match received {
            Ok((n, client, local)) => (n, Peer { client, local }),
            Err(e) => {
                // ICMP errors reported on the listening socket, buffer errors: never fatal.
                tracing::debug!(port, error = %e, "udp receive failed");
                continue;
            }
        };
        let snapshot = node.snapshot.load();
        let Some(l) = snapshot.listener_on(port, true) else {
            continue;
        };
        let now = Instant::now();

        let keep = flows
            .map
            .get_mut(&peer)
            .is_some_and(|f| still_good(f, l, now));
        if !keep {
            if let Some(mut gone) = flows.map.remove(&peer) {
                gone.ending(Cause::Moved);
            }
            // A loop, as a reload may have lowered the bound.
            let most = l.cfg.udp_max_flows.min(snapshot.udp_flow_share);
            let evicted = flows.make_room(most, ms_since(origin));
            if evicted > 0 {
                l.metrics.udp_evicted.increment(evicted);
            }
            // Where the client is: looked up once per new flow, counted once.
            let place = l.locate(peer.client.ip());
            l.count_client(place.as_ref());
            let mut opened = open_flow(&node, l, &socket, peer, place.as_ref(), origin).await;
            // Out of open files: each eviction closes a flow's socket (once its reply task,
            // aborted, is dropped: hence the yield) and the flow is opened again.
            for _ in 0..4 {
                if !matches!(
                    opened,
                    Err(Failed {
                        why: NoFlow::Exhausted,
                        ..
                    })
                ) || !flows.evict(ms_since(origin))
                {
                    break;
                }
                l.metrics.udp_evicted.increment(1);
                tokio::task::yield_now().await;
                opened = open_flow(&node, l, &socket, peer, place.as_ref(), origin).await;
            }
            let log = snapshot.access.as_ref();
            match opened {
                Ok(mut flow) => {
                    flow.log = log.cloned();
                    flow.place = place;
                    flows.insert(peer, flow, ms_since(origin));
                    if draining.is_some() {
                        l.metrics.udp_draining.increment(1);
                    }
                }
                Err(failed) => {
                    if failed.why == NoFlow::NoRoute {
                        l.metrics.no_route.increment(1);
                    }
                    l.metrics.udp_flows.set(flows.map.len() as f64);
                    if let Some(log) = log {
                        log.send(Box::new(failed.line(l, peer, place, now)));
                    }
                    continue;
                }
            }
            l.metrics.udp_flows.set(flows.map.len() as f64);
        }
        let flow = flows.map.get_mut(&peer).expect("flow present");
        flow.traffic.last.store(ms_since(origin), Ordering::Relaxed);
        match flow.upstream.send(&buf[..n]).await {
            Ok(_) => {
                l.metrics.bytes_up.increment(n as u64);
                flow.up += n as u64;
            }
            Err(e) => {
                // A refused endpoint (ICMP port unreachable) shows up here: a passive failure;
                // the flow moves on the next datagram once the endpoint is marked.
                tracing::debug!(client = %peer.client, error = %e, "udp send to endpoint failed");
                l.groups[flow.group].endpoints[flow.endpoint]
                    .failures
                    .increment(1);
                flow.pick.error(ErrorKind::Connect, Instant::now());
                flow.traffic.refused.store(true, Ordering::Relaxed);
                l.attempt_failed(flow.group, &flow.pick, &e);
            }
        }
    };
    flows.clear(end);
}

/// When a stopped loop's drain ends: its listener's `drain_timeout` from now; `None` when the
/// port is no longer configured (a reload removed it: its flows have nowhere to go).
fn drain_until(node: &Inner, port: u16) -> Option<Instant> {
    let snapshot = node.snapshot.load();
    let l = snapshot.listener_on(port, true)?;
    Some(Instant::now() + l.cfg.drain_timeout)
}

/// True when the flow may keep its endpoint: still in the running config, and serving (usable,
/// or draining: a draining endpoint keeps the flows it has) — or, while the listener is
/// fail-open, enabled, not `down` and not failed since the flow was opened: fail-open ignores
/// the marks that keep every endpoint out, so flows stay put instead of moving on every
/// datagram, but one whose endpoint fails it moves. The endpoint is read as the running config
/// has it (a reload may have set `drain` or `down` on it).
fn still_good(flow: &mut Flow, l: &Arc<ListenerState>, now: Instant) -> bool {
    if !Arc::ptr_eq(&flow.listener, l) {
        // A reload: keep the flow only if its endpoint survived (same run-time state, its
        // configuration perhaps changed).
        let survived = l.groups.iter().enumerate().find_map(|(gi, g)| {
            let endpoints = g.balancer.endpoints();
            let ei = endpoints
                .iter()
                .position(|e| e.same_runtime(flow.pick.endpoint()))?;
            Some((gi, ei))
        });
        match survived {
            Some((gi, ei)) => {
                flow.group = gi;
                flow.endpoint = ei;
                flow.listener = l.clone();
            }
            None => return false,
        }
    }
    let e = &l.groups[flow.group].balancer.endpoints()[flow.endpoint];
    e.is_serving(now)
        || (l.planned.load().plan.admit() == Admit::IgnoringHealth
            && e.is_admitted()
            && !e.failed_since(flow.opened))
}

fn expire(node: &Inner, port: u16, flows: &mut Flows<Peer, Flow>, origin: Instant) {
    let snapshot = node.snapshot.load();
    let Some(l) = snapshot.listener_on(port, true) else {
        flows.clear(Cause::ListenerRemoved);
        return;
    };
    let before = flows.map.len();
    flows.expire(l.cfg.idle_timeout.as_millis() as u64, ms_since(origin));
    if flows.map.len() != before {
        l.metrics.udp_flows.set(flows.map.len() as f64);
    }
}

/// Why no flow was opened.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum NoFlow {
    /// No group could take the flow (`gtd_no_route_total`).
    NoRoute,
    /// Every attempt the budget allowed failed (each a passive failure of its endpoint), as a
    /// TCP connection whose connects all failed: not counted as no route.
    Failed,
    /// This node is out of open files (or socket memory): not the endpoint's failure.
    Exhausted,
}

/// Why no flow was opened, with what was tried.
struct Failed {
    why: NoFlow,
    /// The group and endpoint last tried.
    tried: Option<(usize, usize)>,
    /// Attempts after the first.
    retries: u32,
}

impl Failed {
    /// The log line of the datagram that opened no flow (received at `at`; it reached no
    /// endpoint).
    fn line(
        &self,
        l: &ListenerState,
        peer: Peer,
        place: Option<gtd_core::geoip::Place>,
        at: Instant,
    ) -> Stream {
        Stream {
            udp: true,
            client: peer.client,
            place,
            listener: l.cfg.clone(),
            target: self.tried,
            retries: self.retries,
            bytes_in: 0,
            bytes_out: 0,
            started: at,
            ended: Instant::now(),
            cause: match self.why {
                NoFlow::NoRoute => Cause::NoRoute,
                NoFlow::Failed => Cause::ConnectFailed,
                NoFlow::Exhausted => Cause::OutOfFiles,
            },
        }
    }
}

/// Chooses group and endpoint for a new flow and connects a socket to it (trying others on
/// failure, as TCP does).
async fn open_flow(
    node: &Inner,
    l: &Arc<ListenerState>,
    listen: &Arc<Listen>,
    peer: Peer,
    place: Option<&gtd_core::geoip::Place>,
    origin: Instant,
) -> Result<Flow, Failed> {
    let key = StreamKey(peer.client.ip());
    let mut router = Attempts::for_client(l, None, peer.client.ip(), place);
    let mut budget = Budget::new(&l.cfg, Instant::now());
    let mut tried = None;
    let failed = |why, tried, budget: &Budget| Failed {
        why,
        tried,
        retries: budget.made().saturating_sub(1),
    };
    loop {
        let now = Instant::now();
        if !budget.allows(now) {
            return Err(failed(NoFlow::Failed, tried, &budget));
        }
        // Nothing left after a failed attempt is that attempt's failure, not "no route" (as TCP).
        let Some(attempt) = router.next(&key, now) else {
            let why = if budget.made() == 0 {
                NoFlow::NoRoute
            } else {
                NoFlow::Failed
            };
            return Err(failed(why, tried, &budget));
        };
        if budget.spend() {
            l.metrics.retries.increment(1);
        }
        tried = Some((attempt.group, attempt.pick.index()));
        match crate::connect::connect_udp(attempt.pick.address(), node.source_ip()).await {
            Ok(upstream) => {
                let opened = Instant::now();
                let upstream = Arc::new(upstream);
                let traffic = Arc::new(Traffic {
                    last: AtomicU64::new(ms_since(origin)),
                    down: AtomicU64::new(0),
                    refused: AtomicBool::new(false),
                });
                let pick = Arc::new(attempt.pick);
                l.groups[attempt.group].endpoints[pick.index()]
                    .connections
                    .increment(1);
                let replies = tokio::spawn(replies(
                    upstream.clone(),
                    listen.clone(),
                    peer,
                    traffic.clone(),
                    origin,
                    l.clone(),
                    (attempt.group, pick.clone()),
                ));
                return Ok(Flow {
                    peer,
                    id: 0,
                    upstream,
                    endpoint: pick.index(),
                    pick,
                    opened,
                    group: attempt.group,
                    listener: l.clone(),
                    traffic,
                    replies,
                    log: None,
                    place: None,
                    retries: budget.made().saturating_sub(1),
                    up: 0,
                    end: Cause::Expired,
                });
            }
            Err(e) if crate::connect::exhausted(&e) => {
                return Err(failed(NoFlow::Exhausted, tried, &budget));
            }
            Err(e) => {
                tracing::debug!(endpoint = %attempt.pick.address(), error = %e, "udp flow setup failed");
                attempt.pick.error(ErrorKind::Connect, Instant::now());
                l.attempt_failed(attempt.group, &attempt.pick, &e);
            }
        }
    }
}

thread_local! {
    /// Where reply tasks read datagrams: one buffer per runtime thread, not 64 KiB per flow
    /// (with 15 000 flows that was 1 GB of address space and 158 MB resident).
    static REPLY_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; MAX_DATAGRAM].into_boxed_slice());
}

/// What one read of an endpoint's socket came to.
enum Reply {
    /// A datagram handed to the listener's socket: its size, `None` when the send failed.
    Relayed(Option<usize>),
    /// A datagram the listener's socket had no room for yet: a copy to send when it has.
    Waiting(Vec<u8>),
}

/// Relays the endpoint's datagrams back to the client from the listener's socket.
async fn replies(
    upstream: Arc<UdpSocket>,
    listen: Arc<Listen>,
    peer: Peer,
    traffic: Arc<Traffic>,
    origin: Instant,
    l: Arc<ListenerState>,
    (group, pick): (usize, Arc<Pick>),
) {
    loop {
        if let Err(e) = upstream.readable().await {
            tracing::debug!(client = %peer.client, error = %e, "udp endpoint socket failed");
            return;
        }
        // Read and relay without awaiting, so the thread's buffer is enough.
        let read: io::Result<Reply> = REPLY_BUF.with_borrow_mut(|buf| {
            let n = upstream.try_recv(buf)?;
            Ok(match listen.try_send(&buf[..n], peer.client, peer.local) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Reply::Waiting(buf[..n].to_vec())
                }
                sent => Reply::Relayed(sent.ok().map(|_| n)),
            })
        });
        let relayed = match read {
            Ok(Reply::Relayed(n)) => n,
            Ok(Reply::Waiting(datagram)) => {
                let sent = listen.send(&datagram, peer.client, peer.local).await;
                sent.is_ok().then_some(datagram.len())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                pick.error(ErrorKind::Connect, Instant::now());
                traffic.refused.store(true, Ordering::Relaxed);
                l.attempt_failed(group, &pick, &e);
                // Keep listening: the flow moves when the loop sees the endpoint unusable.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => {
                tracing::debug!(client = %peer.client, error = %e, "udp receive from endpoint failed");
                return;
            }
        };
        traffic.last.store(ms_since(origin), Ordering::Relaxed);
        // A reply is the flow's success (docs/design.md §5): it ends a mark when this flow is
        // the probe after fail_timeout. The clock is read only when failures are counted.
        if pick.success_pending() {
            l.attempt_succeeded(group, &pick, Instant::now());
        }
        if let Some(n) = relayed {
            l.metrics.bytes_down.increment(n as u64);
            traffic.down.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}
