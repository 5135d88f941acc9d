//! [`ScenarioEntry`]: one scenario of the library, of any kind — what the scenario list shows
//! of it and how a fresh simulation of it is made. The server's list, `simtree scenarios`, the
//! CLI's runs and tree creation read the library through it instead of asking "social, trading
//! or ABM?" each.

use std::sync::Arc;

use simtree_shared::{ScenarioSummary, SimKind};

use super::{AbmSim, Sim, SimError};
use crate::scenario::{AbmScenario, Scenario, ScenarioError, ScenarioLibrary, TradingScenario, UserScenario};
use crate::trading::data::MarketData;
use crate::trading::episode::TradingEpisode;

/// Steps an agent-based model runs by default (its file has no setting for it).
pub(crate) const ABM_DEFAULT_STEPS: u64 = 10;

/// One scenario of the library, borrowed from it.
#[derive(Clone, Copy, Debug)]
pub enum ScenarioEntry<'a> {
    Social(&'a Scenario),
    Trading(&'a TradingScenario),
    Abm(&'a AbmScenario),
}

impl<'a> From<&'a UserScenario> for ScenarioEntry<'a> {
    /// A scenario a user brought, seen as a library entry (made into a simulation alike).
    fn from(s: &'a UserScenario) -> Self {
        match s {
            UserScenario::Social(s) => ScenarioEntry::Social(s),
            UserScenario::Trading(t) => ScenarioEntry::Trading(t),
            UserScenario::Abm(a) => ScenarioEntry::Abm(a),
        }
    }
}

impl<'a> ScenarioEntry<'a> {
    /// Every scenario: the social scenes, then the trading episodes, then the models.
    pub(crate) fn all(library: &'a ScenarioLibrary) -> impl Iterator<Item = ScenarioEntry<'a>> + 'a {
        let social = library.scenarios.iter().map(ScenarioEntry::Social);
        let trading = library.trading.iter().map(ScenarioEntry::Trading);
        social.chain(trading).chain(library.abm.iter().map(ScenarioEntry::Abm))
    }

    /// The scenario called `id`; the error lists the ones there are.
    pub(crate) fn find(library: &'a ScenarioLibrary, id: &str) -> Result<ScenarioEntry<'a>, SimError> {
        ScenarioEntry::all(library).find(|e| e.id() == id).ok_or_else(|| {
            SimError::Scenario(format!(
                "{} (available: {})",
                ScenarioError::Unknown(id.to_string()),
                library.ids().join(", ")
            ))
        })
    }

    pub(crate) fn id(&self) -> &'a str {
        match self {
            ScenarioEntry::Social(s) => &s.id,
            ScenarioEntry::Trading(t) => &t.id,
            ScenarioEntry::Abm(a) => &a.id,
        }
    }

    pub(crate) fn kind(&self) -> SimKind {
        match self {
            ScenarioEntry::Social(_) => SimKind::Social,
            ScenarioEntry::Trading(_) => SimKind::Trading,
            ScenarioEntry::Abm(_) => SimKind::Abm,
        }
    }

    /// Turns (social), decision points (trading) or steps (ABM) a run takes by default.
    pub(crate) fn default_turns(&self) -> u64 {
        match self {
            ScenarioEntry::Social(s) => s.default_turns,
            ScenarioEntry::Trading(t) => t.default_turns,
            ScenarioEntry::Abm(_) => ABM_DEFAULT_STEPS,
        }
    }

    /// The entry of `GET /api/scenarios`.
    pub(crate) fn summary(&self) -> ScenarioSummary {
        let (title, description, scene) = match self {
            ScenarioEntry::Social(s) => {
                let scene = serde_json::to_value(s.scene.kind).ok().and_then(|v| v.as_str().map(str::to_string));
                (&s.title, &s.description, scene)
            }
            ScenarioEntry::Trading(t) => (&t.title, &t.description, None),
            ScenarioEntry::Abm(a) => (&a.title, &a.description, None),
        };
        ScenarioSummary {
            id: self.id().to_string(),
            title: title.clone(),
            description: description.clone(),
            kind: self.kind(),
            scene,
            default_turns: self.default_turns(),
            origin: simtree_shared::ScenarioOrigin::Shipped,
            version: None,
        }
    }

    /// A fresh simulation of the scenario. `seed` replaces a social scenario's own seed and
    /// seeds a model (0 when `None`); a trading episode needs the market data.
    pub(crate) fn instantiate(&self, seed: Option<u64>, market: Option<&Arc<MarketData>>) -> Result<Sim, SimError> {
        Ok(match self {
            ScenarioEntry::Social(s) => Sim::Social(s.build(seed).map_err(|e| SimError::Scenario(e.to_string()))?),
            ScenarioEntry::Trading(t) => {
                let market = market.ok_or(SimError::NoMarket)?.clone();
                Sim::Trading(TradingEpisode::new(market, t.episode.clone())?)
            }
            ScenarioEntry::Abm(a) => Sim::Abm(AbmSim::new(a.model.clone(), seed.unwrap_or(0))),
        })
    }
}
