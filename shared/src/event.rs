//! The log's event types ([`EventType`]: the `type` of a [`LogEntry`]) and the tie between each
//! type and the struct its `data` is ([`EventPayload`]).
//!
//! The server builds every event from a payload type through [`EventPayload::KIND`], so an event
//! cannot carry another type's data; a client reads one back with [`LogEntry::payload_of`]. The
//! social payloads are in `social.rs`, trading's `decision_point` and the agent-based models'
//! `abm_step` in `trading.rs` and `abm.rs`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::LogEntry;

macro_rules! event_types {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// The type of a log record. Serialised in snake_case, exactly as upstream's log `type`
        /// strings.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum EventType { $($(#[$doc])* $variant),* }

        impl EventType {
            pub const ALL: &'static [EventType] = &[$(EventType::$variant),*];

            /// The wire name (`action_end`).
            pub fn as_str(self) -> &'static str {
                match self { $(EventType::$variant => $name),* }
            }
        }
    };
}

event_types! {
    SystemBroadcast => "system_broadcast",
    AgentProcessStart => "agent_process_start",
    AgentProcessEnd => "agent_process_end",
    ActionStart => "action_start",
    ActionEnd => "action_end",
    AgentCtxDelta => "agent_ctx_delta",
    PlanUpdate => "plan_update",
    EmotionUpdate => "emotion_update",
    LandlordDeal => "landlord_deal",
    /// Not upstream: one decision point of a trading episode (its log, portfolio and value).
    DecisionPoint => "decision_point",
    /// Not upstream: one step of an agent-based model (`{step, values}` of its tracked variables).
    AbmStep => "abm_step",
    /// Not upstream: an agent step that failed (unparseable LLM output after all retries, an
    /// action missing a required field, an LLM error). Upstream prints these to stdout and logs
    /// nothing.
    AgentError => "agent_error",
    /// Not upstream: the counterfactual a branch applied — its ops, as sent — written first in
    /// the branch node's own log, so every reading of a path (feed, viewer, compare, exports)
    /// shows where the "what if" happened, whatever the ops' own events.
    Counterfactual => "counterfactual",
}

/// The payload of a `counterfactual` entry: the branch's ops, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Counterfactual {
    pub ops: Vec<crate::Op>,
}

impl EventPayload for Counterfactual {
    const KIND: EventType = EventType::Counterfactual;
}

impl EventType {
    /// The type of a wire name; `None` for a type this version does not know (an imported log
    /// may hold any).
    pub fn from_name(name: &str) -> Option<EventType> {
        EventType::ALL.iter().copied().find(|t| t.as_str() == name)
    }
}

/// A struct that is the `data` of one event type. The server makes events only from these, so
/// the type of an event and the shape of its data always agree.
pub trait EventPayload: Serialize {
    const KIND: EventType;
}

impl LogEntry {
    /// The entry's type, when this version knows it.
    pub fn event_type(&self) -> Option<EventType> {
        EventType::from_name(&self.kind)
    }

    /// The entry's `data` as `P` when the entry is of `P`'s type and has its shape.
    pub fn payload_of<P: EventPayload + DeserializeOwned>(&self) -> Option<P> {
        (self.kind == P::KIND.as_str()).then(|| self.payload()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_serde_names_and_round_trip() {
        for &t in EventType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            assert_eq!(EventType::from_name(t.as_str()), Some(t));
        }
        assert_eq!(EventType::from_name("trade"), None);
    }
}
