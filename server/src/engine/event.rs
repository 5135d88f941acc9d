//! Events: the typed records that leave the engine, and the scene events that agents read.
//!
//! Two different things are called "event" upstream and both live here:
//! * [`Event`] — a log record `{type, data}` emitted by the simulator or an agent (what the tree
//!   stores per node and streams over WebSockets), made only from one of `simtree_shared`'s
//!   payload types ([`Event::of`]);
//! * [`SceneEvent`] — something that happens *inside* the story (a chat message, a public
//!   announcement) and is rendered into a line of text such as `[18:03] [Message] Alice: hi`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use simtree_shared::{EventPayload, EventType, SceneEventClass};

/// One log record as the engine emits it. The tree adds the producing node id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: EventType,
    pub data: Value,
}

impl Event {
    /// The event of a payload (one of `simtree_shared`'s event payloads), of the payload's type.
    pub(crate) fn of<P: EventPayload>(payload: &P) -> Self {
        Event {
            kind: P::KIND,
            // The payloads have string keys and finite numbers: serialising cannot fail.
            data: serde_json::to_value(payload).unwrap_or(Value::Null),
        }
    }
}

/// Where a running simulator delivers its events, in emission order.
pub trait EventSink {
    fn emit(&mut self, event: Event);

    /// Whether the sink keeps the state of the run so far ([`Self::state`]); asked after each
    /// turn, so a sink that wants none costs the run nothing.
    fn wants_state(&self) -> bool {
        false
    }

    /// The agents' state after a turn, for a sink that [wants](Self::wants_state) it.
    fn state(&mut self, _state: simtree_shared::NodeState) {}
}

impl EventSink for Vec<Event> {
    fn emit(&mut self, event: Event) {
        self.push(event);
    }
}

/// A sink that drops everything (benchmarks, builders).
pub struct Discard;

impl EventSink for Discard {
    fn emit(&mut self, _event: Event) {}
}

impl<F: FnMut(Event)> EventSink for F {
    fn emit(&mut self, event: Event) {
        self(event)
    }
}

/// Renders the time prefix for a minute count: `[H:MM] `. Hours are not wrapped at 24, as
/// upstream (1500 minutes → `[25:00] `).
pub(crate) fn time_prefix(time: Option<i64>) -> String {
    match time {
        Some(m) => format!("[{}:{:02}] ", m.div_euclid(60), m.rem_euclid(60)),
        None => String::new(),
    }
}

/// Something that happens in the story and is told to agents as one line of text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SceneEvent {
    Message { sender: String, message: String },
    Public { content: String, prefix: String },
    News { content: String },
    Status { data: String },
    Speak { sender: String, message: String },
    TalkTo { sender: String, recipient: String, message: String },
}

impl SceneEvent {
    /// A public announcement with the default `Public Event` prefix.
    pub(crate) fn public(content: impl Into<String>) -> Self {
        SceneEvent::Public { content: content.into(), prefix: "Public Event".into() }
    }

    /// A public announcement with a custom prefix (`System`, `Event`, …).
    pub(crate) fn public_with(prefix: &str, content: impl Into<String>) -> Self {
        SceneEvent::Public { content: content.into(), prefix: prefix.into() }
    }

    /// The line an agent reads, with the `[H:MM] ` prefix when a time is given.
    pub(crate) fn line(&self, time: Option<i64>) -> String {
        let t = time_prefix(time);
        match self {
            SceneEvent::Message { sender, message } => format!("{t}[Message] {sender}: {message}"),
            SceneEvent::Public { content, prefix } => format!("{t}{prefix}: {content}"),
            SceneEvent::News { content } => format!("{t}[NEWS] {content}"),
            SceneEvent::Status { data } => format!("{t}Status: {data}"),
            SceneEvent::Speak { sender, message } => format!("{t}{sender}: {message}"),
            SceneEvent::TalkTo { sender, recipient, message } => {
                format!("{t}{sender} to {recipient}: {message}")
            }
        }
    }

    /// The agent who caused the event; it never receives its own broadcast.
    pub(crate) fn sender(&self) -> Option<&str> {
        match self {
            SceneEvent::Message { sender, .. }
            | SceneEvent::Speak { sender, .. }
            | SceneEvent::TalkTo { sender, .. } => Some(sender),
            _ => None,
        }
    }

    /// Upstream's event class, written as `system_broadcast.data.type`.
    pub(crate) fn class(&self) -> SceneEventClass {
        match self {
            SceneEvent::Message { .. } => SceneEventClass::MessageEvent,
            SceneEvent::Public { .. } => SceneEventClass::PublicEvent,
            SceneEvent::News { .. } => SceneEventClass::NewsEvent,
            SceneEvent::Status { .. } => SceneEventClass::StatusEvent,
            SceneEvent::Speak { .. } => SceneEventClass::SpeakEvent,
            SceneEvent::TalkTo { .. } => SceneEventClass::TalkToEvent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_prefix_does_not_wrap_hours() {
        assert_eq!(time_prefix(Some(1080)), "[18:00] ");
        assert_eq!(time_prefix(Some(1083)), "[18:03] ");
        assert_eq!(time_prefix(Some(1500)), "[25:00] ");
        assert_eq!(time_prefix(None), "");
    }

    #[test]
    fn lines_match_upstream_templates() {
        let m = SceneEvent::Message { sender: "Alice".into(), message: "hi".into() };
        assert_eq!(m.line(Some(1080)), "[18:00] [Message] Alice: hi");
        assert_eq!(SceneEvent::public("x").line(None), "Public Event: x");
        assert_eq!(SceneEvent::public_with("Event", "y").line(Some(61)), "[1:01] Event: y");
        assert_eq!(SceneEvent::News { content: "n".into() }.line(None), "[NEWS] n");
        assert_eq!(SceneEvent::Status { data: "s".into() }.line(None), "Status: s");
        let s = SceneEvent::Speak { sender: "Bo".into(), message: "m".into() };
        assert_eq!(s.line(None), "Bo: m");
        let t = SceneEvent::TalkTo { sender: "A".into(), recipient: "B".into(), message: "m".into() };
        assert_eq!(t.line(Some(0)), "[0:00] A to B: m");
        assert_eq!(t.class(), SceneEventClass::TalkToEvent);
        assert_eq!(t.sender(), Some("A"));
    }
}
