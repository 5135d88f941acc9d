//! The live text of running nodes: what the tree socket's `delta` messages say a model is
//! writing now, per node, for the live view in Studio and the SimTree page.
//!
//! Pure (tested natively). Only the current call of a node is kept: a delta of a later call
//! (the run's next call, or a retry) starts the text over. A piece that does not continue the
//! text where it ends (the socket missed some, or the page joined mid-reply) is kept after a
//! `…`. A node's text goes when the graph no longer says it runs (its log then has the reply).

use std::collections::HashMap;

use simtree_shared::TreeMsg;

use crate::model::GraphModel;

/// The most text kept per node (the server sends at most 64 KiB per call).
const MAX_BYTES: usize = 64 * 1024;

/// One node's reply as far as it has come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub call: u64,
    pub text: String,
    /// Whose turn the call is, when the server says.
    pub agent: Option<String>,
    /// Bytes of the reply the text's end stands for (the text may have skipped some).
    end: u64,
}

/// The live replies of the running nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveText(pub HashMap<u64, Reply>);

impl LiveText {
    /// Applies one tree-socket message (after the graph took it); true when what is shown
    /// changed.
    pub fn apply(&mut self, msg: &TreeMsg, graph: &GraphModel) -> bool {
        match msg {
            TreeMsg::Delta { node, call, at, text, agent } => {
                let r = self.0.entry(*node).or_default();
                if *call != r.call || r.text.is_empty() {
                    *r = Reply { call: *call, ..Reply::default() };
                    if *at > 0 {
                        r.text.push('…');
                    }
                } else if *at != r.end {
                    r.text.push('…');
                }
                if r.text.len() + text.len() <= MAX_BYTES {
                    r.text.push_str(text);
                }
                r.end = at + text.len() as u64;
                if agent.is_some() {
                    r.agent.clone_from(agent);
                }
                true
            }
            TreeMsg::RunFinish { .. } | TreeMsg::Deleted { .. } | TreeMsg::Snapshot(_) => {
                let before = self.0.len();
                self.0.retain(|n, _| graph.running.contains(n));
                self.0.len() != before
            }
            _ => false,
        }
    }

    /// The text `node`'s model is writing now, if any.
    pub fn of(&self, node: u64) -> Option<&str> {
        self.0.get(&node).map(|r| r.text.as_str())
    }

    /// The agent whose reply `node`'s model is writing now, when known.
    pub fn agent_of(&self, node: u64) -> Option<&str> {
        self.0.get(&node)?.agent.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(node: u64, call: u64, at: u64, text: &str) -> TreeMsg {
        TreeMsg::Delta { node, call, at, text: text.into(), agent: Some(format!("agent of call {call}")) }
    }

    #[test]
    fn pieces_grow_a_call_s_text_later_calls_start_over_and_gaps_show() {
        let g = GraphModel::default();
        let mut live = LiveText::default();
        assert!(live.apply(&delta(2, 0, 0, "Hel"), &g));
        live.apply(&delta(2, 0, 3, "lo é"), &g);
        assert_eq!(live.of(2), Some("Hello é"));
        live.apply(&delta(2, 1, 0, "Next"), &g);
        assert_eq!(live.of(2), Some("Next"), "a later call starts over");
        assert_eq!(live.agent_of(2), Some("agent of call 1"), "and names its own agent");
        live.apply(&delta(2, 1, 10, "gap"), &g);
        assert_eq!(live.of(2), Some("Next…gap"), "missed pieces show as …");
        live.apply(&delta(3, 4, 7, "joined late"), &g);
        assert_eq!(live.of(3), Some("…joined late"));
        // Not running any more (the default graph runs nothing): gone.
        assert!(live.apply(&TreeMsg::RunFinish { node: 2, status: Default::default(), error: None, turns: None }, &g));
        assert_eq!((live.of(2), live.of(3)), (None, None));
    }
}
