//! simtree: branching timelines for multi-agent simulations.
//!
//! * [`engine`] — the pure simulation core (agents, scenes, orderings, the turn loop);
//! * [`llm`] — the LLM seam and the offline mock dialect;
//! * [`scenario`] — scenario files (`assets/scenarios/*.json`) turned into simulators;
//! * [`trading`] — trading episodes on real market data (seed 003);
//! * [`abm`] — agent-based models in sd-ai's abm-quant format, run on a Python/Mesa worker;
//! * [`embedded`] — the shipped assets and web UI inside the binary;
//! * [`memory`] — the server-wide memory budget;
//! * [`headless`] — runs without a server (`simtree run`, sweeps);
//! * [`sweep`] — parameter sweeps over paired seeds;
//! * [`explore`] — budgeted searches of an intervention space (successive halving);
//! * [`workbench`] — the application service: trees, runs, clients, limits;
//! * [`fleet`] — a server's life on its database: lead, follow, take over; the job workers;
//! * [`cli`] — the `simtree` command line;
//! * [`testing`] — internals for integration tests and benchmarks only.

pub mod abm;
pub mod backend;
pub mod chunks;
pub mod cli;
pub mod embedded;
pub mod engine;
pub mod explore;
pub mod fleet;
pub mod headless;
pub mod http;
pub mod llm;
pub mod memory;
pub mod scenario;
pub mod sim;
pub mod store;
pub mod sweep;
pub mod testing;
pub mod trading;
pub mod tree;
pub mod workbench;
