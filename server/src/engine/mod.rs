//! The simulation engine: pure, synchronous state plus one async seam (the LLM).
//!
//! Invariants: the engine does no I/O and knows nothing of HTTP; every observable effect leaves as
//! a typed [`event::Event`]; all randomness comes from the simulator's seeded [`rng::Rng`]; a
//! [`simulator::Simulator`] is plain data whose clone costs the same at any history length.
//!
//! Reading order: `simulator` (the turn loop) → `agent` (one decision) → `parse` (strict response
//! format) → `action` (registry, shared handlers) → `scenes/*` (one file per scene) → `ordering`.

pub mod action;
pub mod agent;
pub mod branch;
pub mod event;
pub mod hooks;
pub mod memory;
pub mod ordering;
pub mod parse;
pub mod plan;
pub mod prompt;
pub mod pyrepr;
pub mod rng;
pub mod scenes;
pub mod scripted;
pub mod simulator;
pub mod world;

pub use agent::Agent;
pub use event::{Event, EventSink, EventType, SceneEvent};
pub use ordering::Ordering;
pub use scenes::{Scene, SceneKind, SceneRules};
pub use simulator::{RunReport, SimOptions, Simulator};
