//! What model calls cost: a price table (US dollars per million prompt and completion tokens, per
//! model) that turns recorded tokens into money for usage, estimates and money budgets.
//!
//! Prompt tokens a provider served from its cache cost less (the `cached` price), and tokens it
//! wrote to its cache may cost more (the `cache_write` price: Anthropic's 1.25 times the prompt
//! price); either defaults to the prompt price. A call answered by another run's identical call
//! (coalesced) costs nothing. What caching and coalescing saved is the difference from every
//! prompt token at the prompt price ([`PriceTable::tally`]).
//!
//! The table starts from a small default of well-known hosted models' list prices and takes a
//! file (`--prices FILE`, or `SIMTREE_PRICES`) whose entries add to or replace the defaults. A
//! model is looked up by its `dialect:model` label first, then by the model's name alone. The
//! offline players (`mock`, `scripted`) and models the table does not name have no price: their
//! money is `null`, never a guess. A price file is input from outside, so it is read with limits
//! (size, entries, name length) and every price must be a finite number from 0 to 10,000.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::chat::Usage;
use super::record::LlmRecord;

/// Dollars per million tokens, each way, and for prompt tokens read from or written to the
/// provider's cache.
#[derive(Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    pub(crate) prompt: f64,
    pub(crate) completion: f64,
    /// Per million prompt tokens served from the provider's cache; the prompt price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cached: Option<f64>,
    /// Per million prompt tokens written to the provider's cache; the prompt price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cache_write: Option<f64>,
    /// Per million tokens kept in an explicit cache, per hour (Gemini's `cachedContents`
    /// storage); nothing when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cache_storage: Option<f64>,
}

impl Price {
    /// What `prompt` and `completion` tokens cost at this price, every prompt token at the
    /// prompt price (as if nothing were cached).
    pub(crate) fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.prompt + completion as f64 * self.completion) / 1e6
    }

    /// What `usage` cost: cached prompt tokens at the cached price, those written to the cache at
    /// the cache-write price, the rest at the prompt price.
    pub(crate) fn cost_of(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage.cache_write_tokens.min(usage.prompt_tokens - cached);
        let plain = usage.prompt_tokens - cached - written;
        (plain as f64 * self.prompt
            + cached as f64 * self.cached.unwrap_or(self.prompt)
            + written as f64 * self.cache_write.unwrap_or(self.prompt)
            + usage.completion_tokens as f64 * self.completion)
            / 1e6
    }

    /// The most `prompt` and `completion` tokens can cost, whatever the cache does (every prompt
    /// token at the higher of the prompt and cache-write prices): what a money cap holds.
    pub(crate) fn worst(&self, prompt: u64, completion: u64) -> f64 {
        let per_prompt = self.prompt.max(self.cache_write.unwrap_or(self.prompt));
        (prompt as f64 * per_prompt + completion as f64 * self.completion) / 1e6
    }

    /// What an explicit cache of `tokens` kept for `ttl_s` seconds costs: the tokens written once
    /// at the cache-write price, then stored for the whole lifetime asked for.
    pub(crate) fn stored(&self, tokens: u64, ttl_s: u64) -> f64 {
        let hours = ttl_s as f64 / 3600.0;
        tokens as f64 * (self.cache_write.unwrap_or(self.prompt) + self.cache_storage.unwrap_or(0.0) * hours) / 1e6
    }

    /// What a recorded call cost: nothing when coalesced (another run's call paid), else its
    /// tokens and the explicit cache it created.
    fn paid(&self, r: &LlmRecord) -> f64 {
        if r.coalesced {
            return 0.0;
        }
        let created = r.cache.as_ref().and_then(|c| c.created);
        self.cost_of(&r.usage()) + created.map_or(0.0, |c| self.stored(c.tokens, c.ttl_s))
    }
}

/// The derived form, but `cache_storage` only when there is one: a tree's provenance names the
/// hash of the table's debug form, which must not change for tables that set none.
impl std::fmt::Debug for Price {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Price");
        d.field("prompt", &self.prompt)
            .field("completion", &self.completion)
            .field("cached", &self.cached)
            .field("cache_write", &self.cache_write);
        if self.cache_storage.is_some() {
            d.field("cache_storage", &self.cache_storage);
        }
        d.finish()
    }
}

/// Money of recorded calls: what they cost, and what caching and coalescing saved.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    pub money: f64,
    /// Every prompt token at the prompt price, less what the calls cost (negative when cache
    /// writes cost more than cache reads saved).
    pub saved: f64,
}

/// Why a price file was refused; the message names the file's entry at fault.
#[derive(Debug, thiserror::Error)]
#[error("price table: {0}")]
pub struct PriceError(pub String);

/// Prices by model label (`openai:gpt-4o-mini`) or model name (`gpt-4o-mini`). Its serde form
/// (an object of model → price) travels in a budgeted run's job, so the worker counts money at
/// the serving process's prices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    models: BTreeMap<String, Price>,
}

/// The largest price file read, its most entries and longest model name.
const MAX_FILE_BYTES: u64 = 1 << 20;
const MAX_ENTRIES: usize = 10_000;
const MAX_NAME: usize = 200;
/// The highest price per million tokens accepted (a typo of a few zeros is refused, not billed).
const MAX_PRICE: f64 = 10_000.0;

/// List prices of well-known hosted models (USD per million tokens: prompt, completion, cached
/// prompt, cache write) at the time of writing. OpenAI and Gemini charge nothing extra to write
/// their caches; Anthropic charges 1.25 times the prompt price. Providers change them: a price
/// file overrides any of them. They carry no explicit cache storage price: the table is named
/// by its hash in every tree's provenance, which stored trees keep, so Gemini's storage price is
/// one a price file adds.
const DEFAULTS: &[(&str, f64, f64, f64, Option<f64>)] = &[
    ("gpt-4o", 2.50, 10.00, 1.25, None),
    ("gpt-4o-mini", 0.15, 0.60, 0.075, None),
    ("gpt-4.1", 2.00, 8.00, 0.50, None),
    ("gpt-4.1-mini", 0.40, 1.60, 0.10, None),
    ("gpt-4.1-nano", 0.10, 0.40, 0.025, None),
    ("claude-3-5-haiku-latest", 0.80, 4.00, 0.08, Some(1.00)),
    ("claude-3-5-sonnet-latest", 3.00, 15.00, 0.30, Some(3.75)),
    ("claude-sonnet-4-0", 3.00, 15.00, 0.30, Some(3.75)),
    ("gemini-1.5-flash", 0.075, 0.30, 0.01875, None),
    ("gemini-2.0-flash", 0.10, 0.40, 0.025, None),
];

impl Default for PriceTable {
    fn default() -> PriceTable {
        PriceTable {
            models: DEFAULTS
                .iter()
                .map(|&(m, prompt, completion, cached, cache_write)| {
                    let price = Price { prompt, completion, cached: Some(cached), cache_write, cache_storage: None };
                    (m.to_string(), price)
                })
                .collect(),
        }
    }
}

impl PriceTable {
    /// The defaults with a price file's entries added or replaced: a JSON object of model →
    /// `{"prompt": dollars per 1M tokens, "completion": …}`, optionally with `"cached"` and
    /// `"cache_write"` (each the prompt price when absent) and `"cache_storage"` (per hour;
    /// nothing when absent).
    pub(crate) fn with_file(text: &str) -> Result<PriceTable, PriceError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let entries: BTreeMap<String, Price> =
            serde_path_to_error::deserialize(de).map_err(|e| PriceError(format!("{}: {}", e.path(), e.inner())))?;
        if entries.len() > MAX_ENTRIES {
            return Err(PriceError(format!("{} entries; at most {MAX_ENTRIES}", entries.len())));
        }
        let mut table = PriceTable::default();
        for (model, price) in entries {
            if model.trim().is_empty() || model.len() > MAX_NAME {
                return Err(PriceError(format!("{model:?}: a model name has 1 to {MAX_NAME} characters")));
            }
            let optional =
                [("cached", price.cached), ("cache_write", price.cache_write), ("cache_storage", price.cache_storage)];
            let given = optional.iter().filter_map(|&(what, v)| Some((what, v?)));
            for (what, v) in [("prompt", price.prompt), ("completion", price.completion)].into_iter().chain(given) {
                if !(v.is_finite() && (0.0..=MAX_PRICE).contains(&v)) {
                    return Err(PriceError(format!(
                        "{model}.{what}: {v} is not a price from 0 to {MAX_PRICE} dollars per million tokens"
                    )));
                }
            }
            table.models.insert(model, price);
        }
        Ok(table)
    }

    /// The defaults plus the file at `path` (at most 1 MiB).
    pub(crate) fn load(path: &Path) -> Result<PriceTable, PriceError> {
        let at = |e: String| PriceError(format!("{}: {e}", path.display()));
        let size = std::fs::metadata(path).map_err(|e| at(e.to_string()))?.len();
        if size > MAX_FILE_BYTES {
            return Err(at(format!("{size} bytes; a price file has at most {MAX_FILE_BYTES}")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
        PriceTable::with_file(&text).map_err(|e| at(e.0))
    }

    /// The price of the model behind `label` (`dialect:model`): the label's entry, else the
    /// model name's; none for the offline players.
    pub(crate) fn price(&self, label: &str) -> Option<Price> {
        let (dialect, model) = label.split_once(':').unwrap_or(("", label));
        if matches!(dialect, "mock" | "scripted") {
            return None;
        }
        self.models.get(label).or_else(|| self.models.get(model)).copied()
    }

    /// What `usage` cost on `label`'s model, cached tokens at their price; `None` when it has no
    /// price.
    pub(crate) fn cost(&self, label: &str, usage: &Usage) -> Option<f64> {
        self.price(label).map(|p| p.cost_of(usage))
    }

    /// What an explicit cache of `tokens` kept `ttl_s` seconds costs on `label`'s model
    /// ([`Price::stored`]); `None` when it has no price.
    pub(crate) fn stored(&self, label: &str, tokens: u64, ttl_s: u64) -> Option<f64> {
        self.price(label).map(|p| p.stored(tokens, ttl_s))
    }

    /// What recorded calls cost: `None` when there are none or any lacks a price (a call
    /// recorded before models were, or on an unpriced model), so a sum is never a partial one.
    pub(crate) fn money_of<'a>(&self, records: impl IntoIterator<Item = &'a LlmRecord>) -> Option<f64> {
        self.tally(records).map(|t| t.money)
    }

    /// What recorded calls cost and what caching and coalescing saved, on the terms of
    /// [`PriceTable::money_of`]. A coalesced call costs nothing and saves its full price; an
    /// explicit cache a call created is part of what it cost.
    pub fn tally<'a>(&self, records: impl IntoIterator<Item = &'a LlmRecord>) -> Option<Tally> {
        let mut t = Tally::default();
        let mut any = false;
        for r in records {
            let price = self.price(r.model.as_deref()?)?;
            let full = price.cost(r.prompt_tokens, r.completion_tokens);
            let paid = price.paid(r);
            t.money += paid;
            t.saved += full - paid;
            any = true;
        }
        any.then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_priced_by_label_then_name_and_offline_players_never() {
        let t = PriceTable::with_file(
            r#"{"openai:local-llama": {"prompt": 0, "completion": 0},
                                          "gpt-4o-mini": {"prompt": 1, "completion": 2}}"#,
        )
        .unwrap();
        assert_eq!(t.price("openai:gpt-4o-mini").unwrap().completion, 2.0, "the file replaces a default");
        assert_eq!(t.price("anthropic:claude-3-5-haiku-latest").unwrap().prompt, 0.80);
        assert_eq!(t.price("openai:local-llama").unwrap().prompt, 0.0);
        assert_eq!(t.price("gemini:local-llama"), None, "a label entry is for that dialect only");
        assert_eq!(t.price("mock:gpt-4o"), None);
        assert_eq!(t.price("openai:who-knows"), None);
        let usage =
            Usage { prompt_tokens: 1_000_000, completion_tokens: 500_000, cached_tokens: 0, cache_write_tokens: 0 };
        assert_eq!(t.cost("openai:gpt-4o-mini", &usage), Some(2.0));
    }

    #[test]
    fn cached_and_cache_written_tokens_have_prices_of_their_own() {
        let t = PriceTable::with_file(r#"{"m": {"prompt": 10, "completion": 20, "cached": 1, "cache_write": 12.5}}"#)
            .unwrap();
        let p = t.price("openai:m").unwrap();
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            cached_tokens: 600_000,
            cache_write_tokens: 300_000,
        };
        // 100k plain at $10, 600k cached at $1, 300k written at $12.50, 100k out at $20.
        assert!((p.cost_of(&usage) - (1.0 + 0.6 + 3.75 + 2.0)).abs() < 1e-12);
        assert!((p.cost(1_000_000, 100_000) - 12.0).abs() < 1e-12, "cost ignores the cache");
        assert!((p.worst(1_000_000, 100_000) - 14.5).abs() < 1e-12, "at the dearer cache write");
        // Without those prices every prompt token is a prompt token; counts past the prompt's are
        // clamped (a server that reports more cached tokens than prompt tokens).
        let plain = PriceTable::with_file(r#"{"m": {"prompt": 10, "completion": 20}}"#).unwrap();
        let p = plain.price("m").unwrap();
        assert!((p.cost_of(&usage) - p.cost(1_000_000, 100_000)).abs() < 1e-12);
        let odd = Usage { cached_tokens: 5_000_000, ..usage };
        assert!((t.price("m").unwrap().cost_of(&odd) - (1.0 + 2.0)).abs() < 1e-12);
        let e = PriceTable::with_file(r#"{"m": {"prompt": 1, "completion": 1, "cached": -1}}"#).unwrap_err();
        assert!(e.to_string().contains("m.cached"), "{e}");
    }

    #[test]
    fn a_coalesced_call_costs_nothing_and_saves_its_price() {
        let t = PriceTable::default();
        let call = LlmRecord {
            prompt_tokens: 2_000,
            completion_tokens: 1_000,
            model: Some("openai:gpt-4o-mini".into()),
            ..LlmRecord::default()
        };
        let shared = LlmRecord { coalesced: true, ..call.clone() };
        let one = t.money_of([&call]).unwrap();
        let tally = t.tally([&call, &shared]).unwrap();
        assert!((tally.money - one).abs() < 1e-15 && (tally.saved - one).abs() < 1e-15, "{tally:?}");
    }

    #[test]
    fn a_created_cache_is_written_once_and_stored_for_its_lifetime() {
        use crate::llm::chat::{CacheCreated, CacheUse};
        let t = PriceTable::with_file(r#"{"m": {"prompt": 2, "completion": 4, "cache_storage": 1}}"#).unwrap();
        // 1M tokens written at the prompt price ($2) and kept 90 minutes at $1 an hour.
        assert!((t.stored("gemini:m", 1_000_000, 5400).unwrap() - 3.5).abs() < 1e-12);
        let call = LlmRecord { prompt_tokens: 1_000_000, model: Some("gemini:m".into()), ..LlmRecord::default() };
        let creator = LlmRecord {
            cache: Some(CacheUse {
                created: Some(CacheCreated { tokens: 1_000_000, ttl_s: 3600 }),
                ..CacheUse::default()
            }),
            ..call.clone()
        };
        let tally = t.tally([&creator]).unwrap();
        assert!((tally.money - (2.0 + 3.0)).abs() < 1e-12, "{tally:?}");
        assert!((tally.saved + 3.0).abs() < 1e-12, "the cache is a cost: {tally:?}");
        // A coalesced copy of the creator's answer paid for nothing.
        let copy = LlmRecord { coalesced: true, ..creator };
        assert_eq!(t.money_of([&copy]), Some(0.0));
        // Without a storage price only the write is paid, and the price's debug form (whose
        // hash provenance names) is what it was before storage prices existed.
        let plain = PriceTable::with_file(r#"{"m": {"prompt": 2, "completion": 4}}"#).unwrap();
        assert!((plain.stored("gemini:m", 1_000_000, 3600).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(
            format!("{:?}", plain.price("m").unwrap()),
            "Price { prompt: 2.0, completion: 4.0, cached: None, cache_write: None }"
        );
        assert!(format!("{:?}", t.price("m").unwrap()).ends_with("cache_storage: Some(1.0) }"));
        let e = PriceTable::with_file(r#"{"m": {"prompt": 1, "completion": 1, "cache_storage": -2}}"#).unwrap_err();
        assert!(e.to_string().contains("m.cache_storage"), "{e}");
    }

    #[test]
    fn a_hostile_price_file_is_refused_with_the_entry_at_fault() {
        for (text, names) in [
            (r#"{"m": {"prompt": -1, "completion": 0}}"#, "m.prompt"),
            (r#"{"m": {"prompt": 1e300, "completion": 0}}"#, "m.prompt"),
            (r#"{"m": {"prompt": 1, "completion": 0, "x": 1}}"#, "m"),
            (r#"{"m": {"prompt": 1}}"#, "m"),
            (r#"{"": {"prompt": 1, "completion": 1}}"#, "model name"),
            (r#"[1]"#, "price table"),
        ] {
            let e = PriceTable::with_file(text).unwrap_err().to_string();
            assert!(e.contains(names), "{names:?} not in {e:?}");
        }
        let long = format!(r#"{{"{}": {{"prompt": 1, "completion": 1}}}}"#, "m".repeat(201));
        assert!(PriceTable::with_file(&long).is_err());
    }

    #[test]
    fn recorded_calls_are_summed_only_when_every_one_has_a_price() {
        let t = PriceTable::default();
        let call = |model: Option<&str>| LlmRecord {
            prompt_tokens: 2_000,
            completion_tokens: 1_000,
            model: model.map(str::to_string),
            ..LlmRecord::default()
        };
        let priced = [call(Some("openai:gpt-4o-mini")), call(Some("openai:gpt-4o-mini"))];
        let m = t.money_of(&priced).unwrap();
        assert!((m - 2.0 * (2_000.0 * 0.15 + 1_000.0 * 0.60) / 1e6).abs() < 1e-15, "{m}");
        assert_eq!(t.money_of(&[call(Some("openai:gpt-4o-mini")), call(None)]), None);
        assert_eq!(t.money_of(&[]), None);
    }
}
