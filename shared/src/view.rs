//! What `GET …/node/{n}/view` answers ([`NodeView`], one variant per simulation kind) and the
//! payloads of the log events a client reads by field (`LogEntry::data`), with
//! [`LogEntry::payload`] to read one.
//!
//! The social events are written by the engine with upstream SocialSim4's shapes; the payload
//! types here name the fields the DevUI reads and ignore the rest, so they read upstream's logs
//! as well as this server's.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::LogEntry;
use crate::abm::AbmView;
use crate::trading::TradingView;

/// The kind-specific view of a node, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeView {
    Social(SocialView),
    /// Boxed: the trading view is several times the size of the others.
    Trading(Box<TradingView>),
    Abm(AbmView),
}

impl NodeView {
    /// The simulation kind the view is of.
    pub fn kind(&self) -> crate::SimKind {
        match self {
            NodeView::Social(_) => crate::SimKind::Social,
            NodeView::Trading(_) => crate::SimKind::Trading,
            NodeView::Abm(_) => crate::SimKind::Abm,
        }
    }

    pub fn social(&self) -> Option<&SocialView> {
        match self {
            NodeView::Social(v) => Some(v),
            _ => None,
        }
    }

    pub fn trading(&self) -> Option<&TradingView> {
        match self {
            NodeView::Trading(v) => Some(v),
            _ => None,
        }
    }

    pub fn abm(&self) -> Option<&AbmView> {
        match self {
            NodeView::Abm(v) => Some(v),
            _ => None,
        }
    }
}

/// The `social` variant of a node view: the scene type and its state (an object whose keys
/// differ per scene).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SocialView {
    pub scene: String,
    pub state: Value,
}

impl LogEntry {
    /// The entry's `data` read as `T` (one of the payload types of its `type`); `None` when it
    /// does not have that shape.
    pub fn payload<T: DeserializeOwned>(&self) -> Option<T> {
        T::deserialize(&self.data).ok()
    }
}

/// `agent_ctx_delta`: a line appended to an agent's short memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CtxDelta {
    pub agent: String,
    pub role: String,
    pub content: String,
}

/// `agent_error`: an agent step that failed (social) or a decision point whose model call failed
/// (trading).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentErrorEvent {
    pub agent: String,
    pub step: u64,
    pub error: String,
}

/// `system_broadcast`: a scene event told to the agents, as the line they read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Broadcast {
    /// Upstream's event class name (`PublicEvent`, `MessageEvent`, …).
    #[serde(rename = "type", default)]
    pub class: String,
    #[serde(default)]
    pub text: String,
}

/// `action_end`: what the DevUI shows of a finished action.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ActionEnd {
    #[serde(default)]
    pub agent: String,
    /// The action call as the agent made it: `{action, …its arguments}`.
    #[serde(default)]
    pub action: Value,
    /// The action's result (scene-specific; a message action's has `message`).
    #[serde(default)]
    pub result: Value,
    #[serde(default)]
    pub summary: Option<String>,
}

impl ActionEnd {
    /// The action's name (`send_message`, `yield`, …); empty when missing.
    pub fn name(&self) -> &str {
        self.action["action"].as_str().unwrap_or("")
    }

    /// The message a message action sent: the result's, else the call's, else the summary.
    pub fn message(&self) -> Option<&str> {
        self.result["message"]
            .as_str()
            .or_else(|| self.action["message"].as_str())
            .or(self.summary.as_deref())
    }
}

/// `landlord_deal`: the cards dealt; the DevUI shows the bottom cards.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LandlordDeal {
    #[serde(default)]
    pub bottom: Vec<String>,
}
