//! The ABM form's fields, the pure part (tested natively): which places of an agent-based
//! model's document the form shows — the run's step limit, each global variable's starting value,
//! and each agent type's initial count and attributes' starting values — each as a JSON pointer
//! with its label, its description and how a typed value is read. The structure (which
//! variables, agents and behaviours there are) stays the JSON view's to change.

use serde_json::Value;

/// How the text typed into a field becomes the value written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parse {
    /// A whole number or nothing (the step limit).
    Count,
    /// The text as it is (a `string` variable).
    Text,
    /// JSON when it parses (a number, `true`, a `{"function": …}` call), else the text (a
    /// `globalVariable.…` reference).
    Value,
}

/// One field of the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Where it writes, as a JSON pointer into the document.
    pub ptr: String,
    /// The variable's name (or the key: `maxSteps`, `initialCount`).
    pub label: String,
    /// The variable's description, shown as the field's hint.
    pub hint: String,
    pub parse: Parse,
}

/// The form's sections: a heading (`None`: the run and the globals' section; else the agent
/// type's name) and its fields.
pub type Section = (Option<String>, Vec<Field>);

/// The fields of `doc` (an envelope `{model, …}` or a bare model), in the document's order.
pub fn fields(doc: &Value) -> Vec<Section> {
    let base = if doc.get("model").is_some() { "/model" } else { "" };
    let Some(model) = doc.pointer(base).or(Some(doc)).filter(|m| m.is_object()) else {
        return Vec::new();
    };
    let mut run = Vec::new();
    if model.pointer("/terminationCriteria/maxSteps").is_some() {
        run.push(Field {
            ptr: format!("{base}/terminationCriteria/maxSteps"),
            label: "maxSteps".into(),
            hint: String::new(),
            parse: Parse::Count,
        });
    }
    run.extend(variables(model, &format!("{base}/globalVariables"), "globalVariables"));
    let mut out = vec![(None, run)];
    let groups = model.get("agents").and_then(Value::as_array).into_iter().flatten();
    for (i, group) in groups.enumerate() {
        for (j, agent) in group.as_array().into_iter().flatten().enumerate() {
            let at = format!("{base}/agents/{i}/{j}");
            let mut list = vec![Field {
                ptr: format!("{at}/initialCount"),
                label: "initialCount".into(),
                hint: String::new(),
                parse: Parse::Value,
            }];
            list.extend(variables(agent, &format!("{at}/agentAttributes"), "agentAttributes"));
            out.push((Some(agent_name(agent).unwrap_or_else(|| format!("agents[{i}][{j}]"))), list));
        }
    }
    out
}

/// The starting value of each variable of the list `key` of `holder`, written under `at`.
fn variables(holder: &Value, at: &str, key: &str) -> Vec<Field> {
    let list = holder.get(key).and_then(Value::as_array).into_iter().flatten();
    list.enumerate()
        .map(|(k, v)| {
            let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
            Field {
                ptr: format!("{at}/{k}/initialValue"),
                label: Some(text("name")).filter(|n| !n.is_empty()).unwrap_or_else(|| format!("{key}[{k}]")),
                hint: text("description"),
                parse: if text("type") == "string" { Parse::Text } else { Parse::Value },
            }
        })
        .collect()
}

/// An agent type's name, as its attributes' and behaviours' sourceNames spell it
/// (`agent.<AgentType>.…`).
fn agent_name(agent: &Value) -> Option<String> {
    ["agentAttributes", "agentBehaviors"]
        .iter()
        .filter_map(|key| agent.get(*key)?.as_array())
        .flatten()
        .filter_map(|v| v.get("sourceName")?.as_str())
        .find_map(|s| Some(s.strip_prefix("agent.")?.split('.').next()?.to_string()))
}

/// An HTML id for the field at `ptr` (`abm-model-globalVariables-0-initialValue`).
pub fn field_id(ptr: &str) -> String {
    format!("abm{}", ptr.replace('/', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_models_run_globals_and_agents_are_fields() {
        let doc = json!({"success": true, "model": {
            "globalVariables": [
                {"name": "rate", "description": "Chance a step", "type": "number", "initialValue": 0.1},
                {"name": "label", "type": "string", "initialValue": "S"}
            ],
            "agents": [[{
                "agentAttributes": [{"name": "wealth", "description": "Units held", "type": "integer",
                                     "initialValue": 1, "sourceName": "agent.Trader.agentAttribute.wealth"}],
                "initialCount": "globalVariable.population"
            }], [{"initialCount": 5}]],
            "terminationCriteria": {"maxSteps": 300}
        }});
        let sections = fields(&doc);
        type Short = (String, String, Parse);
        let short: Vec<(Option<String>, Vec<Short>)> = sections
            .into_iter()
            .map(|(h, f)| (h, f.into_iter().map(|f| (f.ptr, f.label, f.parse)).collect()))
            .collect();
        let f = |p: &str, l: &str, k: Parse| (p.to_string(), l.to_string(), k);
        assert_eq!(
            short,
            vec![
                (
                    None,
                    vec![
                        f("/model/terminationCriteria/maxSteps", "maxSteps", Parse::Count),
                        f("/model/globalVariables/0/initialValue", "rate", Parse::Value),
                        f("/model/globalVariables/1/initialValue", "label", Parse::Text),
                    ]
                ),
                (
                    Some("Trader".into()),
                    vec![
                        f("/model/agents/0/0/initialCount", "initialCount", Parse::Value),
                        f("/model/agents/0/0/agentAttributes/0/initialValue", "wealth", Parse::Value),
                    ]
                ),
                (Some("agents[1][0]".into()), vec![f("/model/agents/1/0/initialCount", "initialCount", Parse::Value)]),
            ]
        );
        assert_eq!(fields(&json!({}))[0].1, vec![], "an empty document has no field");
        assert_eq!(field_id("/model/globalVariables/0/initialValue"), "abm-model-globalVariables-0-initialValue");
    }
}
