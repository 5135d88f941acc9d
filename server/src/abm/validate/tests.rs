use super::*;
use serde_json::json;

const SEED: &str = include_str!("../../../tests/fixtures/abm/seed000_sir_example.json");

/// The model inside the seed's envelope.
fn m(v: &mut Value) -> &mut Value {
    &mut v["model"]
}

fn seed_value() -> Value {
    serde_json::from_str(SEED).unwrap()
}

fn report_of(v: Value) -> Report {
    let doc = AbmDocument::from_value(v).expect("parses");
    validate_document(&doc)
}

fn has(r: &Report, sev: Severity, code: &str, path: &str) -> bool {
    r.issues.iter().any(|i| i.severity == sev && i.code == code && i.path == path)
}

fn listing(r: &Report) -> String {
    r.issues.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_seed_example_has_two_real_reference_errors() {
    let r = report_of(seed_value());
    let errors: Vec<(&str, &str)> = r.errors().map(|i| (i.code.as_str(), i.path.as_str())).collect();
    assert_eq!(
        errors,
        vec![
            ("unknown-function", "model.agents[0][0].initialCount.function"),
            ("unresolved-reference", "model.terminationCriteria.terminationRules[0].sourceName"),
        ],
        "{}",
        listing(&r)
    );
    let text = listing(&r);
    assert!(text.contains("getTotalPopulation"), "{text}");
    assert!(text.contains("globalVariable.totalPopulation"), "{text}");
    assert!(text.contains("globalVariable.infectedCount"), "{text}");
    // The pitfalls: Mesa-2 idioms under "3.0", and nobody is ever infected.
    let p0 = "model.agents[0][0].agentBehaviors[0].code";
    let p1 = "model.agents[0][0].agentBehaviors[1].code";
    assert!(has(&r, Severity::Warning, "mesa2-idiom", p0), "{text}");
    assert!(has(&r, Severity::Warning, "mesa2-idiom", p1), "{text}");
    assert!(
        has(&r, Severity::Warning, "no-initial-seeding", "model.agents[0][0].agentAttributes[0].initialValue"),
        "{text}"
    );
    assert!(text.contains("line 14: 'schedule.time'"), "{text}");
}

#[test]
fn shipped_examples_have_no_errors_or_warnings() {
    for name in ["sir_network.json", "forest_fire.json", "wealth_exchange.json"] {
        let path = format!("{}/../assets/abm/{name}", env!("CARGO_MANIFEST_DIR"));
        let doc = AbmDocument::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
        let r = validate_document(&doc);
        assert!(r.issues.is_empty(), "{name}:\n{}", listing(&r));
    }
}

/// Applies `edit` to the seed example and expects exactly the finding (severity, code, path)
/// among the results.
/// A table row: an edit of the seed model, the issue code it must raise and the issue's path.
type Case = (fn(&mut Value), &'static str, &'static str);

fn expect(edit: impl FnOnce(&mut Value), sev: Severity, code: &str, path: &str) -> Report {
    let mut v = seed_value();
    edit(&mut v);
    let r = report_of(v);
    assert!(has(&r, sev, code, path), "expected {code} at {path}, got:\n{}", listing(&r));
    r
}

#[test]
fn each_error_class_is_reported_with_its_path() {
    use Severity::Error;
    #[rustfmt::skip]
    let cases: [Case; 21] = [
        (|v| m(v)["globalVariables"][1]["sourceName"] = json!("globalVariables.infectionRate"), "source-name-format", "model.globalVariables[1].sourceName"),
        (|v| { m(v)["globalVariables"][2]["name"] = json!("infectionRate"); m(v)["globalVariables"][2]["sourceName"] = json!("globalVariable.infectionRate"); }, "duplicate-source-name", "model.globalVariables[2].sourceName"),
        (|v| m(v)["globalVariables"][0]["name"] = json!("total population"), "bad-identifier", "model.globalVariables[0].name"),
        (|v| m(v)["agents"][0][0]["agentAttributes"][1]["sourceName"] = json!("agent.People.agentAttribute.infectionTime"), "source-name-format", "model.agents[0][0].agentAttributes[1].sourceName"),
        (|v| { m(v)["agents"][0][0]["agentAttributes"] = json!([]); m(v)["agents"][0][0]["agentBehaviors"] = json!([]); }, "agent-type-name", "model.agents[0][0]"),
        (|v| m(v)["scheduler"]["schedule"]["scheduleOrder"][1]["sourceName"] = json!("agent.Person.agentBehavior.recover"), "unresolved-reference", "model.scheduler.schedule.scheduleOrder[1].sourceName"),
        (|v| m(v)["scheduler"]["initialization"]["initializationOrder"][3]["sourceName"] = json!("agent.Human.initialCount"), "unresolved-reference", "model.scheduler.initialization.initializationOrder[3].sourceName"),
        (|v| m(v)["dataAnalytics"]["trackedVariables"][1]["sourceName"] = json!("globalVariable.population"), "unresolved-reference", "model.dataAnalytics.trackedVariables[1].sourceName"),
        (|v| m(v)["globalVariables"][1]["initialValue"] = json!("globalVariable.baseRate"), "unresolved-reference", "model.globalVariables[1].initialValue"),
        (|v| m(v)["globalVariables"][0]["initialValue"] = json!({"function": "computePopulation", "args": []}), "unknown-function", "model.globalVariables[0].initialValue.function"),
        (|v| { let code = m(v)["agents"][0][0]["agentBehaviors"][0]["code"].as_str().unwrap().replace("globalFunction.calculateInfectionProbability", "globalFunction.infectionChance"); m(v)["agents"][0][0]["agentBehaviors"][0]["code"] = json!(code); }, "unknown-function", "model.agents[0][0].agentBehaviors[0].code"),
        (|v| m(v)["scheduler"]["schedule"]["scheduleOrder"][0]["type"] = json!("environmentBehavior"), "type-mismatch", "model.scheduler.schedule.scheduleOrder[0].type"),
        (|v| m(v)["scheduler"]["initialization"]["initializationOrder"][0]["type"] = json!("environmentAttribute"), "type-mismatch", "model.scheduler.initialization.initializationOrder[0].type"),
        (|v| m(v)["globalVariables"][1]["initialValue"] = json!("high"), "type-mismatch", "model.globalVariables[1].initialValue"),
        (|v| m(v)["agents"][0][0]["agentAttributes"][0]["initialValue"] = json!(0), "type-mismatch", "model.agents[0][0].agentAttributes[0].initialValue"),
        (|v| m(v)["agents"][0][0]["initialCount"] = json!(12.5), "type-mismatch", "model.agents[0][0].initialCount"),
        (|v| m(v)["terminationCriteria"]["maxSteps"] = json!(0), "type-mismatch", "model.terminationCriteria.maxSteps"),
        (|v| m(v)["terminationCriteria"]["terminationRules"][0]["sourceName"] = json!("agent.Person.agentAttribute.status"), "type-mismatch", "model.terminationCriteria.terminationRules[0].type"),
        (|v| m(v)["scheduler"]["schedule"]["scheduleOrder"][0]["orderInSchedule"] = json!(0), "type-mismatch", "model.scheduler.schedule.scheduleOrder[0].orderInSchedule"),
        (|v| m(v)["dataAnalytics"]["trackedVariables"][0]["sourceName"] = json!("agent.Person.agentBehavior.checkRecovery"), "type-mismatch", "model.dataAnalytics.trackedVariables[0].sourceName"),
        (|v| { m(v)["agents"][0][0]["agentAttributes"][2]["name"] = json!("unique_id"); m(v)["agents"][0][0]["agentAttributes"][2]["sourceName"] = json!("agent.Person.agentAttribute.unique_id"); }, "reserved-name", "model.agents[0][0].agentAttributes[2].name"),
    ];
    for (edit, code, path) in cases {
        expect(edit, Error, code, path);
    }
}

#[test]
fn pitfall_warnings_are_reported_with_their_path() {
    use Severity::Warning;
    let r = expect(
        |v| {
            let code = "def checkRecovery(self):\n    if self.status == 'I' and self.random.random() < globalVariable.recoveryChance:\n        self.status = 'R'\n        self.daysSick += 1";
            m(v)["agents"][0][0]["agentBehaviors"][1]["code"] = json!(code);
        },
        Warning,
        "undeclared-variable",
        "model.agents[0][0].agentBehaviors[1].code",
    );
    let text = listing(&r);
    assert!(text.contains("globalVariable.recoveryChance"), "{text}");
    assert!(text.contains("self.daysSick"), "{text}");
    #[rustfmt::skip]
    let cases: [Case; 13] = [
        (|v| m(v)["agents"][0][0]["agentBehaviors"][1]["code"] = json!("def checkRecovery(self):\n    if self.status == 'I' and self.random.random() < self.model.recovery_rate:\n        self.status = 'R'"), "undeclared-variable", "model.agents[0][0].agentBehaviors[1].code"),
        (|v| { m(v)["environment"]["topology"]["type"] = json!("grid"); m(v)["environment"]["topology"]["boundaryConditions"] = json!("torus"); }, "mesa2-idiom", "model.agents[0][0].agentBehaviors[0].code"),
        (|v| m(v)["globalFunctions"][0]["code"] = json!("def calculateInfectionProbability(c, t):\n    return environment.humidity * t"), "undeclared-variable", "model.globalFunctions[0].code"),
        (|v| m(v)["abmLibrary"]["version"] = json!("2.4"), "mesa2-idiom", "model.abmLibrary.version"),
        (|v| m(v)["environment"]["topology"]["type"] = json!("grid"), "boundary-conditions", "model.environment.topology.boundaryConditions"),
        (|v| { let order = m(v)["scheduler"]["schedule"]["scheduleOrder"].as_array_mut().unwrap(); order.pop(); }, "unscheduled", "model.agents[0][0].agentBehaviors[1].sourceName"),
        (|v| m(v)["scheduler"]["schedule"]["scheduleOrder"][1]["orderInSchedule"] = json!(1), "duplicate-order", "model.scheduler.schedule.scheduleOrder[1].orderInSchedule"),
        (|v| { let order = m(v)["scheduler"]["initialization"]["initializationOrder"].as_array_mut().unwrap(); order.pop(); }, "not-in-initialization", "model.agents[0][0].initialCount"),
        (|v| m(v)["agents"][0][0]["initialCount"] = json!({"function": "calculateInfectionProbability", "args": [1, 2, 3]}), "argument-count", "model.agents[0][0].initialCount.args"),
        (|v| m(v)["globalFunctions"][0]["code"] = json!("def calculateInfectionProbability(c, t):\n    return np.random.random()"), "unseeded-random", "model.globalFunctions[0].code"),
        (|v| m(v)["globalFunctions"][0]["code"] = json!("def infectionChance(c, t):\n    return 1 - (1 - t) ** c"), "function-name", "model.globalFunctions[0].code"),
        (|v| m(v)["agents"][0][0]["agentBehaviors"][0]["executionMode"] = json!("model-once"), "execution-mode", "model.agents[0][0].agentBehaviors[0].executionMode"),
        (|v| m(v)["codingLanguage"] = json!("julia"), "not-runnable", "model.codingLanguage"),
    ];
    for (edit, code, path) in cases {
        expect(edit, Warning, code, path);
    }
}

#[test]
fn seeding_through_an_initialization_function_silences_the_seeding_warning() {
    let mut v = seed_value();
    v["model"]["globalFunctions"].as_array_mut().unwrap().push(json!({
        "name": "seed", "sourceName": "globalFunction.seed", "functionDescription": "infect one",
        "executionMode": "model-once",
        "code": "def seed(model):\n    model.random.choice(list(model.agents)).status = 'I'"
    }));
    v["model"]["scheduler"]["initialization"]["initializationOrder"]
        .as_array_mut()
        .unwrap()
        .push(json!({"sourceName": "globalFunction.seed", "type": "globalFunction", "orderInInitialization": 5}));
    let r = report_of(v);
    assert!(!r.issues.iter().any(|i| i.code == "no-initial-seeding"), "{}", listing(&r));
}

#[test]
fn strings_and_comments_are_not_scanned() {
    let code = "def f(self):\n    # globalVariable.ghost in a comment\n    s = 'globalVariable.ghost'\n    t = \"\"\"self.schedule.time\n\"\"\"\n    return globalVariable.real";
    let clean = blank_strings_and_comments(code);
    assert_eq!(clean.len(), code.len());
    let found: Vec<String> = dotted(&clean, "globalVariable.").into_iter().map(|x| x.1).collect();
    assert_eq!(found, vec!["real".to_owned()]);
    assert_eq!(line_of(code, clean.find("globalVariable.real").unwrap()), 6);
    assert!(find_word(&clean, "schedule.time").is_none());
    assert_eq!(compared_literals("if n.status == 'I' or 'R' != self.status:", "status"), vec!["I", "R"]);
    assert!(is_assignment(" = 3", 0) && !is_assignment(" += 1", 0) && !is_assignment(" == 3", 0));
}
