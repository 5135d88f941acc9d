//! A payload kept as its sender wrote it and checked against its type: [`Verbatim`].
//!
//! Some op payloads have defaults (`{"kind": "momentum"}` means a lookback of 10) or optional
//! parts (a plan set by a branch may name only its strategy). Reading them into their type and
//! writing that back would fill the defaults in, so an edge's ops, the journal and exports would
//! no longer show what the user sent. A `Verbatim<T>` holds both: the JSON as written, which is
//! what it serialises to, and the `T` read from it, which is what the server acts on. A value
//! that does not read as a `T` is refused when the op is read.

use std::ops::Deref;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A `T` together with the JSON it was read from (see the module's doc).
#[derive(Clone, Debug)]
pub struct Verbatim<T> {
    json: Value,
    value: T,
}

impl<T: Serialize> Verbatim<T> {
    /// A payload made in code: its JSON is the type's own serialisation.
    pub fn new(value: T) -> Self {
        // The payload types are structs and enums with string keys: they always serialise.
        let json = serde_json::to_value(&value).unwrap_or(Value::Null);
        Verbatim { json, value }
    }
}

impl<T> Verbatim<T> {
    /// The JSON as it was written.
    pub fn json(&self) -> &Value {
        &self.json
    }

    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> Deref for Verbatim<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: DeserializeOwned> TryFrom<Value> for Verbatim<T> {
    type Error = serde_json::Error;

    /// Reads `json` as a `T` and keeps it; the error is the type's own (`invalid type: …`).
    fn try_from(json: Value) -> Result<Self, serde_json::Error> {
        let value = T::deserialize(&json)?;
        Ok(Verbatim { json, value })
    }
}

/// Two payloads are the same when they were written the same.
impl<T> PartialEq for Verbatim<T> {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl<T> Serialize for Verbatim<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Verbatim<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Verbatim::try_from(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// Documented as the type it is checked against.
#[cfg(feature = "schema")]
impl<T: schemars::JsonSchema> schemars::JsonSchema for Verbatim<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<T>()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::PlanState;
    use crate::trading::AgentSpec;

    /// Reads `json` and checks it writes back to the same text.
    fn round_trip<T: DeserializeOwned>(json: Value) -> Verbatim<T> {
        let text = json.to_string();
        let v: Verbatim<T> = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), text);
        v
    }

    #[test]
    fn a_payload_writes_back_as_it_was_written_and_reads_as_its_type() {
        let swap = round_trip::<AgentSpec>(json!({"kind": "momentum"}));
        assert_eq!(*swap, AgentSpec::Momentum { lookback: 10 });
        let plan = round_trip::<PlanState>(json!({"strategy": "listen first"}));
        assert_eq!(plan.strategy, "listen first");
        assert!(plan.goals.is_empty());
        // Keys in the sender's order, not the type's.
        round_trip::<AgentSpec>(json!({"band": 2.0, "kind": "mean_reversion"}));
    }

    #[test]
    fn a_payload_that_is_not_its_type_is_refused_with_the_types_message() {
        let e = serde_json::from_value::<Verbatim<PlanState>>(json!({"goals": 3})).unwrap_err();
        assert_eq!(e.to_string(), "invalid type: integer `3`, expected a sequence");
        assert!(serde_json::from_value::<Verbatim<AgentSpec>>(json!({"kind": "nope"})).is_err());
    }

    #[test]
    fn a_payload_made_in_code_is_its_types_json() {
        let v = Verbatim::new(AgentSpec::BuyAndHold);
        assert_eq!(v.json(), &json!({"kind": "buy_and_hold"}));
    }
}
