//! Live text of running nodes: the pieces of a model's reply, as a provider streams them, sent
//! to the tree's watchers as `delta` messages (`TreeMsg::Delta`) on a channel of their own.
//!
//! Nothing here is kept: the reply reaches the node's log and recording as it always does, when
//! the turn ends, and a watcher that connects later gets no earlier pieces. A call streams only
//! while someone watches the tree ([`StreamSink::wanted`]: a tree socket is subscribed), so runs
//! nobody watches make the plain calls they always made. Pieces are gathered and sent at most
//! every [`EVERY`] per node, and a call's live text stops growing at [`MAX_LIVE_BYTES`] (the
//! log has it all), so a fast or huge stream costs watchers a bounded number of bytes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use simtree_shared::TreeMsg;
use tokio::sync::broadcast;

use crate::llm::chat::StreamSink;
use crate::tree::NodeId;

/// The shortest time between two `delta` messages of one node.
pub(crate) const EVERY: Duration = Duration::from_millis(50);

/// The most live text of one call sent to watchers.
pub(crate) const MAX_LIVE_BYTES: usize = 64 * 1024;

/// Messages a tree's delta channel holds for a slow watcher before it misses some.
pub(crate) const DELTA_QUEUE: usize = 256;

/// The live text of one running node.
pub(crate) struct NodeStream {
    node: NodeId,
    tx: broadcast::Sender<TreeMsg>,
    /// The node's own log: someone has the node open while its socket is subscribed.
    log: Option<std::sync::Arc<crate::tree::NodeLog>>,
    pending: Mutex<Pending>,
}

#[derive(Debug)]
struct Pending {
    /// The call being streamed, and whether one has started.
    call: u64,
    started: bool,
    /// Bytes of the call's text sent so far; the text gathered since.
    at: usize,
    text: String,
    sent: Instant,
    /// Whose turn the call is.
    agent: Option<String>,
}

impl NodeStream {
    pub(crate) fn new(node: NodeId, tx: broadcast::Sender<TreeMsg>) -> NodeStream {
        NodeStream {
            node,
            tx,
            log: None,
            pending: Mutex::new(Pending {
                call: 0,
                started: false,
                at: 0,
                text: String::new(),
                sent: Instant::now(),
                agent: None,
            }),
        }
    }

    /// Pacing follows whether `log` (the node's own) is watched.
    pub(crate) fn paced_by(mut self, log: std::sync::Arc<crate::tree::NodeLog>) -> NodeStream {
        self.log = Some(log);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flush(&self, p: &mut Pending) {
        if p.text.is_empty() {
            return;
        }
        let text = std::mem::take(&mut p.text);
        let at = p.at;
        p.at += text.len();
        p.sent = Instant::now();
        let _ =
            self.tx.send(TreeMsg::Delta { node: self.node, call: p.call, at: at as u64, text, agent: p.agent.clone() });
    }
}

impl StreamSink for NodeStream {
    fn wanted(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    fn paced(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.watched())
    }

    fn speaker(&self, agent: Option<&str>) {
        let mut p = self.lock();
        // What was gathered is the last call's, and goes out under its name.
        self.flush(&mut p);
        p.agent = agent.map(str::to_string);
    }

    fn start(&self) {
        let mut p = self.lock();
        self.flush(&mut p);
        if p.started {
            p.call += 1;
        }
        p.started = true;
        p.at = 0;
    }

    fn text(&self, piece: &str) {
        let mut p = self.lock();
        let room = MAX_LIVE_BYTES.saturating_sub(p.at + p.text.len());
        let mut take = piece.len().min(room);
        while !piece.is_char_boundary(take) {
            take -= 1;
        }
        p.text.push_str(&piece[..take]);
        if p.sent.elapsed() >= EVERY {
            self.flush(&mut p);
        }
    }

    fn end(&self) {
        let mut p = self.lock();
        self.flush(&mut p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deltas(rx: &mut broadcast::Receiver<TreeMsg>) -> Vec<(u64, u64, String)> {
        let mut out = Vec::new();
        while let Ok(TreeMsg::Delta { call, at, text, .. }) = rx.try_recv() {
            out.push((call, at, text));
        }
        out
    }

    #[test]
    fn pieces_are_gathered_numbered_by_call_and_bounded() {
        let (tx, mut rx) = broadcast::channel(DELTA_QUEUE);
        let s = NodeStream::new(3, tx);
        assert!(s.wanted(), "a subscriber watches");
        s.start();
        s.text("Hel");
        s.text("lo");
        s.end();
        s.start(); // a retry starts over, as call 1
        s.text("Hé");
        s.end();
        assert_eq!(deltas(&mut rx), vec![(0, 0, "Hello".into()), (1, 0, "Hé".into())], "gathered within {EVERY:?}");
        s.start();
        s.text(&"é".repeat(MAX_LIVE_BYTES));
        s.text("more");
        s.end();
        let got = deltas(&mut rx);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2.len(), MAX_LIVE_BYTES, "cut at the cap, on a character");
        drop(rx);
        assert!(!s.wanted(), "nobody watches");
    }

    #[test]
    fn each_piece_names_the_agent_whose_turn_it_is() {
        let (tx, mut rx) = broadcast::channel(DELTA_QUEUE);
        let s = NodeStream::new(3, tx);
        s.speaker(Some("Alice"));
        s.start();
        s.text("Hi");
        s.speaker(Some("Bob"));
        s.start();
        s.text("Yo");
        s.end();
        let mut said = Vec::new();
        while let Ok(TreeMsg::Delta { text, agent, .. }) = rx.try_recv() {
            said.push((text, agent));
        }
        assert_eq!(said, vec![("Hi".into(), Some("Alice".into())), ("Yo".into(), Some("Bob".into()))]);
    }

    #[test]
    fn replies_are_paced_only_while_the_node_itself_is_open() {
        let (tx, _tree_watcher) = broadcast::channel(DELTA_QUEUE);
        let log = std::sync::Arc::new(crate::tree::NodeLog::default());
        let s = NodeStream::new(3, tx).paced_by(log.clone());
        assert!(s.wanted() && !s.paced(), "the tree is watched, the node is not open");
        let (opened, _) = log.watch(8);
        assert!(s.paced(), "a person has the node open");
        drop(opened);
        assert!(!s.paced());
        let (tx, _w) = broadcast::channel(DELTA_QUEUE);
        assert!(!NodeStream::new(4, tx).paced(), "no log: never paced");
    }
}
