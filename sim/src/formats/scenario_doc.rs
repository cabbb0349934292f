//! The scenario format's reference, generated from the serde types and their doc comments: a JSON
//! Schema (`kvsim schema`, shipped as `docs/scenario.schema.json` for editors: taplo / Even Better
//! TOML read the `#:schema` line at the top of each shipped scenario) and the Markdown reference
//! `docs/scenario-format.md` (`kvsim schema --markdown`). Tests fail when either shipped file is
//! stale, so the reference cannot drift from the parser.

use crate::scenario::ScenarioFile;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// The JSON Schema (draft 2020-12) of a scenario file, pretty-printed with a final newline.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(ScenarioFile);
    let mut v = serde_json::to_value(&schema).expect("schema serialises");
    if let Some(o) = v.as_object_mut() {
        o.insert("$id".into(), "https://github.com/kvsim/kvsim/docs/scenario.schema.json".into());
    }
    // `[[expect]]` values `kvsim check` refuses, refused in the editor too: violation kinds and
    // explored faults by name, a status as an HTTP status or 0 (no response). (The serde types
    // keep them strings and u16 for the error messages with did-you-mean and the line.)
    let kinds: Vec<Value> = crate::check::oracle::ALL_KINDS.iter().map(|k| k.name().into()).collect();
    let faults: Vec<Value> = crate::check::explore::FaultKind::ALL.iter().map(|k| k.name().into()).collect();
    if let Some(props) = v.pointer_mut("/$defs/Expectation/properties") {
        let kind = serde_json::json!({ "enum": kinds });
        props["violations"]["items"] = kind.clone();
        props["absent"]["items"] = kind;
        // A leak is its pool's: no request's (`Expectation::validate`).
        let per_request: Vec<Value> = kinds.iter().filter(|k| *k != "page_leak").cloned().collect();
        props["requests"]["additionalProperties"]["items"] = serde_json::json!({ "enum": per_request });
        props["status"]["additionalProperties"] = serde_json::json!({
            "type": "integer",
            "anyOf": [{ "const": 0 }, { "minimum": 100, "maximum": 599 }]
        });
        // Request ids in their plain decimal form ("00" would be request 0 under another key).
        for key in ["requests", "status"] {
            props[key]["propertyNames"] = serde_json::json!({ "pattern": "^(0|[1-9][0-9]*)$" });
        }
        props["name"]["minLength"] = 1.into();
        props["explore_faults"]["items"] = serde_json::json!({ "enum": faults });
    }
    if let Some(name) = v.pointer_mut("/properties/name") {
        // Not empty nor blank (`resolve` refuses both).
        name["pattern"] = "\\S".into();
    }
    // A decode group has no pipeline stages: the parser refuses `pp_stages` there ("a [[prefill]]
    // setting"), and the editor did not (both groups are one `NodeGroup` type).
    if let Some(items) = v.pointer_mut("/properties/decode/items") {
        items["properties"] = serde_json::json!({ "pp_stages": false });
    }
    // Each `[[faults.script]]` kind's required fields, and the fields it does not take, as the
    // parser checks them (`ScriptKind::fields`): the editor accepted a `crash` without `node`.
    if let Some(entry) = v.pointer_mut("/$defs/ScriptEntry").and_then(Value::as_object_mut) {
        let rules: Vec<Value> = crate::scenario::ScriptKind::ALL
            .iter()
            .map(|k| {
                let (name, wanted, optional) = k.fields();
                let refused: Map<String, Value> = crate::scenario::SCRIPT_FIELDS
                    .iter()
                    .filter(|f| !wanted.contains(f) && !optional.contains(f))
                    .map(|f| (f.to_string(), Value::Bool(false)))
                    .collect();
                serde_json::json!({
                    "if": { "properties": { "kind": { "const": name } }, "required": ["kind"] },
                    "then": { "required": wanted, "properties": refused }
                })
            })
            .collect();
        entry.insert("allOf".into(), Value::Array(rules));
    }
    bound_narrow_integers(&mut v);
    serde_json::to_string_pretty(&v).expect("schema serialises") + "\n"
}

/// Gives every 8-, 16- and 32-bit unsigned integer without a `maximum` its type's largest value:
/// the parser refuses a larger one (`public_blocks = 4294967296`: "expected u32"), and an
/// editor's validator ignores `format`.
fn bound_narrow_integers(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let max = match o.get("format").and_then(Value::as_str) {
                Some("uint8") => Some(u64::from(u8::MAX)),
                Some("uint16") => Some(u64::from(u16::MAX)),
                Some("uint32") => Some(u64::from(u32::MAX)),
                _ => None,
            };
            if let Some(m) = max.filter(|_| !o.contains_key("maximum")) {
                o.insert("maximum".into(), m.into());
            }
            o.values_mut().for_each(bound_narrow_integers);
        }
        Value::Array(a) => a.iter_mut().for_each(bound_narrow_integers),
        _ => {}
    }
}

fn defs(root: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    root.get("$defs").and_then(Value::as_object).unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// Follows a `$ref`, and unwraps `Option<T>` (`anyOf: [T, null]`).
fn resolve<'a>(root: &'a Value, v: &'a Value) -> &'a Value {
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or_default();
        if let Some(d) = defs(root).get(name) {
            return resolve(root, d);
        }
    }
    if let Some(any) = v.get("anyOf").and_then(Value::as_array) {
        let non_null: Vec<&Value> =
            any.iter().filter(|x| x.get("type").and_then(Value::as_str) != Some("null")).collect();
        if non_null.len() == 1 {
            return resolve(root, non_null[0]);
        }
    }
    v
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

fn type_name(root: &Value, v: &Value) -> String {
    let r = resolve(root, v);
    // Several accepted forms (`OnOff`: a word or a boolean): each form's type.
    if let Some(any) = r.get("anyOf").and_then(Value::as_array) {
        return any.iter().map(|x| type_name(root, x)).collect::<Vec<_>>().join(" or ");
    }
    if r.get("enum").is_some() || r.get("oneOf").is_some() {
        return "string (one of)".into();
    }
    let t = match r.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => {
            ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect::<Vec<_>>().join(" | ")
        }
        _ => "any".into(),
    };
    match t.as_str() {
        "array" => {
            let item = r.get("items").map(|i| resolve(root, i));
            match item {
                Some(i) if i.get("properties").is_some() => "array of tables".into(),
                Some(i) => format!("array of {}", type_name(root, i)),
                None => "array".into(),
            }
        }
        "object" if r.get("properties").is_some() => "table".into(),
        "object" => "table of values".into(),
        _ => t,
    }
}

fn allowed(root: &Value, v: &Value) -> String {
    let r = resolve(root, v);
    if let Some(any) = r.get("anyOf").and_then(Value::as_array) {
        return any.iter().map(|x| allowed(root, x)).filter(|a| !a.is_empty()).collect::<Vec<_>>().join("; ");
    }
    // An array's items, a table's values (`[[expect]]` kinds, statuses).
    if let Some(i) = r.get("items") {
        return allowed(root, i);
    }
    if let Some(i) = r.get("additionalProperties").filter(|x| x.is_object()) {
        let a = allowed(root, i);
        return if a.is_empty() { a } else { format!("values: {a}") };
    }
    let mut parts = Vec::new();
    if let Some(c) = r.get("const") {
        parts.push(format!("`{c}`"));
    }
    let variants: Vec<String> = if let Some(e) = r.get("enum").and_then(Value::as_array) {
        e.iter().filter_map(Value::as_str).map(|s| format!("`{s}`")).collect()
    } else if let Some(e) = r.get("oneOf").and_then(Value::as_array) {
        e.iter()
            .filter_map(|x| x.get("const").or_else(|| x.get("enum").and_then(|e| e.get(0))).and_then(Value::as_str))
            .map(|s| format!("`{s}`"))
            .collect()
    } else {
        vec![]
    };
    if !variants.is_empty() {
        parts.push(variants.join(", "));
    }
    let min = r.get("minimum").and_then(Value::as_u64);
    let max = r.get("maximum").and_then(Value::as_u64);
    match (min, max) {
        (Some(0) | None, Some(b)) => parts.push(format!("≤ {b}")),
        (Some(a), Some(b)) => parts.push(format!("{a}..={b}")),
        (Some(a), None) if a > 0 => parts.push(format!("≥ {a}")),
        _ => {}
    }
    if let Some(p) = r.get("pattern").and_then(Value::as_str) {
        parts.push(format!("matches `{}`", p.replace('|', "\\|")));
    }
    parts.join("; ")
}

fn table(root: &Value, obj: &Value, out: &mut String) {
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let _ = writeln!(out, "| key | type | allowed | required | meaning |\n|---|---|---|---|---|");
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let desc = v
                .get("description")
                .or_else(|| resolve(root, v).get("description"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let req = if required.contains(&k.as_str()) { "required" } else { "optional" };
            let _ =
                writeln!(out, "| `{k}` | {} | {} | {req} | {} |", type_name(root, v), allowed(root, v), one_line(desc));
        }
    }
    out.push('\n');
}

/// `docs/scenario-format.md`: every section and key with type, allowed range, whether required,
/// and meaning (units, defaults and the engine flag each corresponds to live in the descriptions).
pub fn format_reference_md() -> String {
    let root: Value = serde_json::from_str(&schema_json()).expect("schema is JSON");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Scenario format\n\n<!-- Generated by `kvsim schema --markdown` from the serde types in `sim/src/formats/scenario.rs`,\n`sim/src/config.rs` and `sim/src/check/expect.rs`. Do not edit: a test fails when this file is stale. -->\n"
    );
    let _ = writeln!(out, "{}\n", one_line(root.get("description").and_then(Value::as_str).unwrap_or("")));
    let _ = writeln!(
        out,
        "A scenario is a TOML file. Unknown keys are errors (with a \"did you mean\"); every number is range-checked where it is read, with an error naming file, line and key (exit 2; an element of an array of tables by its index from 0, `request[1].at_ms`). Times are virtual. Editors validate and complete scenarios with the JSON Schema `docs/scenario.schema.json` (add `#:schema ../docs/scenario.schema.json`, relative to the scenario, as its first line; taplo and Even Better TOML read it). `kvsim new NAME --like small|incident|mooncake` writes a commented starting point.\n"
    );
    let _ = writeln!(out, "## Top level\n");
    let props = root.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut top = root.clone();
    let mut sections = Vec::new();
    if let Some(p) = top.get_mut("properties").and_then(Value::as_object_mut) {
        p.retain(|k, v| {
            let r = resolve(&root, v);
            let is_table = r.get("properties").is_some()
                || r.get("items").map(|i| resolve(&root, i).get("properties").is_some()).unwrap_or(false);
            if is_table {
                sections.push(k.clone());
            }
            !is_table
        });
    }
    table(&root, &top, &mut out);
    for k in sections {
        let v = &props[&k];
        let r = resolve(&root, v);
        let (header, body) = match r.get("items") {
            Some(i) => (format!("[[{k}]]"), resolve(&root, i)),
            None => (format!("[{k}]"), r),
        };
        let _ = writeln!(out, "## `{header}`\n");
        if let Some(d) = v.get("description").and_then(Value::as_str) {
            let _ = writeln!(out, "{}\n", one_line(d));
        }
        if let Some(d) = body.get("description").and_then(Value::as_str) {
            if v.get("description").and_then(Value::as_str) != Some(d) {
                let _ = writeln!(out, "{}\n", one_line(d));
            }
        }
        // Nested arrays of tables (`[[faults.script]]`) get their own section.
        let mut nested = Vec::new();
        let mut flat = body.clone();
        if let Some(p) = flat.get_mut("properties").and_then(Value::as_object_mut) {
            p.retain(|nk, nv| {
                let is_tables = resolve(&root, nv)
                    .get("items")
                    .map(|i| resolve(&root, i).get("properties").is_some())
                    .unwrap_or(false);
                if is_tables {
                    nested.push((nk.clone(), nv.clone()));
                }
                !is_tables
            });
        }
        table(&root, &flat, &mut out);
        for (nk, nv) in nested {
            let item = resolve(&root, resolve(&root, &nv).get("items").expect("items"));
            let _ = writeln!(out, "### `[[{k}.{nk}]]`\n");
            if let Some(d) = nv.get("description").and_then(Value::as_str) {
                let _ = writeln!(out, "{}\n", one_line(d));
            }
            table(&root, item, &mut out);
            if let Some(kind) = item.get("properties").and_then(|p| p.get("kind")) {
                if let Some(vs) = resolve(&root, kind).get("oneOf").and_then(Value::as_array) {
                    let _ = writeln!(out, "Kinds:\n");
                    for v in vs {
                        let name = v.get("const").and_then(Value::as_str).unwrap_or("?");
                        let d = v.get("description").and_then(Value::as_str).unwrap_or("");
                        let _ = writeln!(out, "- `{name}`: {}", one_line(d));
                    }
                    out.push('\n');
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "## Limits\n\n| name | value | applies to |\n|---|---|---|\n| `MAX_TIME_MS` | {} | every time key (`*_ms`; `*_ns` keys: `MAX_TIME_NS` = {}) |\n| `MAX_TOKENS` | {} | context, prompts, outputs, pools, token knobs |\n| `MAX_NODES` | {} | nodes per role over all groups |\n| `MAX_SLOTS_PER_NODE` | {} | `metadata_slots`, `max_running_requests` |\n| `MAX_SLOTS_TOTAL` | {} | metadata slots over all nodes of a role |\n| `MAX_REQUESTS` | {} | requests in a scenario (generated + explicit + trace) |\n| `MAX_NS_PER_UNIT` | {} | `*_ns_per_*` costs |\n| `MAX_BYTES` | {} | `kv_bytes_per_token`, `transfer_bytes_per_us` |",
        crate::scenario::MAX_TIME_MS,
        crate::scenario::MAX_TIME_NS,
        crate::scenario::MAX_TOKENS,
        crate::scenario::MAX_NODES,
        crate::scenario::MAX_SLOTS_PER_NODE,
        crate::scenario::MAX_SLOTS_TOTAL,
        crate::scenario::MAX_REQUESTS,
        crate::scenario::MAX_NS_PER_UNIT,
        crate::scenario::MAX_BYTES
    );
    out
}

/// Which shipped scenario `kvsim new` starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Like {
    /// The incident's mechanism in miniature (1P1D, three explicit requests).
    Small,
    /// The incident at full scale (2P2D, a 1M-token context, a generated workload).
    Incident,
    /// An hour of real traffic from the Mooncake trace (4P4D).
    Mooncake,
}

impl Like {
    /// Every choice, in the order a help text lists them.
    pub const ALL: [Like; 3] = [Like::Small, Like::Incident, Like::Mooncake];

    /// The name a command line gives it.
    pub fn name(self) -> &'static str {
        match self {
            Like::Small => "small",
            Like::Incident => "incident",
            Like::Mooncake => "mooncake",
        }
    }

    /// One line on what it starts from.
    pub fn about(self) -> &'static str {
        match self {
            Like::Small => "The incident's mechanism in miniature (1P1D, three explicit requests)",
            Like::Incident => "The incident at full scale (2P2D, a 1M-token context, a generated workload)",
            Like::Mooncake => "An hour of real traffic from the Mooncake trace (4P4D)",
        }
    }

    fn source(self) -> (&'static str, &'static str) {
        match self {
            Like::Small => ("scenarios/small/stub-leak.toml", include_str!("../../../scenarios/small/stub-leak.toml")),
            Like::Incident => ("scenarios/glm53-incident.toml", include_str!("../../../scenarios/glm53-incident.toml")),
            Like::Mooncake => {
                ("scenarios/mooncake-conversation.toml", include_str!("../../../scenarios/mooncake-conversation.toml"))
            }
        }
    }
}

/// The shipped scenario with every section and every default written out (the knobs stay the
/// shipped overrides: the profile supplies the rest, so `--profile` still switches them).
fn filled(spec: &ScenarioFile, name: &str) -> ScenarioFile {
    use crate::scenario::{to_file, Overrides, RequestEntry, Scenario};
    let mut probe = spec.clone();
    probe.trace = None;
    if probe.request.is_empty() && probe.workload.is_none() {
        probe.request.push(RequestEntry {
            at_ms: Some(0),
            at_ns: None,
            tenant: 0,
            prompt_tokens: 1,
            output_tokens: 1,
            abort_at_ms: None,
            abort_at_ns: None,
            prefix_blocks: vec![],
            streaming: false,
            public_blocks: 0,
        });
    }
    let text = toml::to_string(&probe).expect("a scenario image serialises");
    let cfg = Scenario::parse("shipped.toml", &text)
        .and_then(|s| s.resolve(&Overrides::default()))
        .expect("shipped scenarios resolve");
    let full = to_file(&cfg, false);
    ScenarioFile {
        name: Some(name.to_string()),
        description: spec
            .description
            .clone()
            .or(Some(format!("Started from {}.", spec.name.clone().unwrap_or_default()))),
        seed: full.seed,
        profile: full.profile,
        context_len: full.context_len,
        liveness_bound_s: full.liveness_bound_s,
        prefill: full.prefill,
        decode: full.decode,
        router: full.router,
        cost: full.cost,
        workload: full.workload,
        request: spec.request.clone(),
        trace: spec.trace.clone(),
        knobs: Some(spec.knobs.clone().unwrap_or_default()),
        faults: full.faults,
        expect: spec.expect.clone(),
    }
}

/// `# ` lines of `text` wrapped at 96 columns.
fn comment(text: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in one_line(text).replace("\\|", "|").split(' ') {
        if !line.is_empty() && line.len() + w.len() + 1 > 94 {
            let _ = writeln!(out, "{indent}# {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}# {line}");
    }
    out
}

/// Puts each key's description (and allowed values) above it, as comments.
fn annotate_table(root: &Value, schema: &Value, t: &mut toml_edit::Table) {
    let props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let keys: Vec<String> = t.iter().filter(|(_, i)| i.is_value()).map(|(k, _)| k.to_string()).collect();
    for k in keys {
        let Some(v) = props.get(&k) else { continue };
        let desc =
            v.get("description").or_else(|| resolve(root, v).get("description")).and_then(Value::as_str).unwrap_or("");
        let allowed = allowed(root, v);
        let text = if allowed.is_empty() { desc.to_string() } else { format!("{desc} Allowed: {allowed}.") };
        if let Some(mut key) = t.key_mut(&k) {
            key.leaf_decor_mut().set_prefix(format!("\n{}", comment(&text, "")));
        }
    }
}

/// The `kvsim new` command that writes scenario `name` with `flags` into `file` (a printed path),
/// as it pastes: `--out` when `file` is not the default `NAME.toml`, the name quoted, and after
/// `--` when it starts with `-` (else it reads as a flag).
fn new_command(name: &str, flags: &str, file: &str) -> String {
    let flags = if file == crate::shell_path_str(&format!("{name}.toml")) {
        flags.to_string()
    } else {
        format!("{flags} --out {file}")
    };
    if name.starts_with('-') {
        format!("kvsim new {flags} -- {}", crate::shell_word(name))
    } else {
        format!("kvsim new {} {flags}", crate::shell_word(name))
    }
}

/// A commented starting scenario (`kvsim new`): the shipped scenario `like` with every section
/// present and every value explained by the same descriptions as `docs/scenario-format.md`; `file`
/// is where it is written (its header says to run that).
pub fn starting_scenario(name: &str, like: Like, file: &str) -> String {
    let (path, text) = like.source();
    let spec: ScenarioFile = toml::from_str(text).expect("shipped scenarios parse");
    let like = format!("--like {}", format!("{like:?}").to_lowercase());
    let how = format!("written by `{}` from {path}", new_command(name, &like, file));
    annotated(name, &spec, &how, file)
}

/// A commented starting scenario from engine start-up logs (`kvsim new NAME --from-log LOG…`):
/// the deployment `kvsim audit` measures in them (pools, context, page size; roles as found, or the
/// worst partner the context admits), its warm-up and probe traffic, every section explained.
/// `logs` are (file name, text); errors name the log, line and field.
pub fn starting_scenario_from_logs(name: &str, logs: &[(String, String)], file: &str) -> Result<String, FromLogsError> {
    let mut files = Vec::new();
    for (path, text) in logs {
        let facts = crate::audit::parse::parse_log(path, text).map_err(FromLogsError::Parse)?;
        files.push((path.clone(), facts, None));
    }
    let a = crate::audit::analyse(&files).map_err(FromLogsError::Audit)?;
    // A node whose engine refused to start with its pool served nothing: a scenario of it serving
    // would simulate a deployment that never ran (it wrote one).
    if let Some((n, line)) = a.nodes.iter().find_map(|n| Some((n, n.facts.refused_start?))) {
        return Err(FromLogsError::RefusedStart { source: n.facts.source.clone(), line });
    }
    let sources: Vec<&str> = logs.iter().map(|(p, _)| p.as_str()).collect();
    // The engine profile the logs' build maps to (vLLM logs: `vllm-nixl`), as `kvsim audit` picks it.
    let (profile, why) = a.default_profile();
    let generated = crate::audit::scenario(&a, &sources.join(", "), profile).ok_or(FromLogsError::NoDeployment)?;
    let spec: ScenarioFile = toml::from_str(&generated.toml).map_err(|e| FromLogsError::Unreadable(e.to_string()))?;
    let words: Vec<String> = sources.iter().map(|p| crate::shell_path_str(p)).collect();
    let from = format!("--from-log {}", words.join(" "));
    let mut how = format!("written by `{}`; profile {profile}: {why}", new_command(name, &from, file));
    for a in &generated.assumptions {
        how.push_str(&format!("; assumption: {a}"));
    }
    Ok(annotated(name, &spec, &how, file))
}

/// Why `kvsim new --from-log` wrote nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromLogsError {
    /// A log did not parse (file, line, field).
    Parse(crate::audit::parse::ParseError),
    /// The logs disagree or break a rule of the audit (file, line, field).
    Audit(crate::audit::AuditError),
    /// No context length or no pool in the logs.
    NoDeployment,
    /// A node's engine refused to start with its pool (the log and the refusal's line): it
    /// never served.
    RefusedStart { source: String, line: usize },
    /// The audit's scenario does not read back: a kvsim bug (the `toml` error).
    Unreadable(String),
}

impl std::fmt::Display for FromLogsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FromLogsError::Parse(e) => e.fmt(f),
            FromLogsError::Audit(e) => e.fmt(f),
            FromLogsError::NoDeployment => {
                f.write_str("the logs give no context length or no pool: cannot build a deployment (see `kvsim audit`)")
            }
            FromLogsError::Unreadable(e) => write!(f, "the audit's scenario does not read (a kvsim bug): {e}"),
            FromLogsError::RefusedStart { source, line } => write!(
                f,
                "{source}:{line}: the engine refused to start with this pool, so this launch served nothing and \
                 there is no deployment to simulate (`kvsim audit {}` says why); give the log of a launch that \
                 started, or write the scenario with `kvsim new NAME` and set its pools by hand",
                crate::shell_path_str(source)
            ),
        }
    }
}

impl std::error::Error for FromLogsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FromLogsError::Parse(e) => Some(e),
            FromLogsError::Audit(e) => Some(e),
            _ => None,
        }
    }
}

fn annotated(name: &str, spec: &ScenarioFile, how: &str, file_name: &str) -> String {
    let file = filled(spec, name);
    let root: Value = serde_json::from_str(&schema_json()).expect("schema is JSON");
    let mut doc: toml_edit::DocumentMut =
        toml::to_string(&file).expect("a scenario image serialises").parse().expect("toml reads its own output");
    annotate_table(&root, &root, doc.as_table_mut());
    let props = root.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let names: Vec<String> = doc.as_table().iter().map(|(k, _)| k.to_string()).collect();
    for k in names {
        let Some(v) = props.get(&k) else { continue };
        let r = resolve(&root, v);
        let section_doc = v.get("description").and_then(Value::as_str).unwrap_or("").to_string();
        let item = doc.as_table_mut().get_mut(&k).expect("key listed");
        match item {
            toml_edit::Item::Table(t) => {
                let header = comment(&section_doc, "");
                // Under the `[knobs]` header, before its first key: a line uncommented there is a
                // knob (above the header it was a key of the `[[request]]` before it: "unknown
                // field `request.bootstrap_timeout_ms`").
                let mut list = String::new();
                if k == "knobs" {
                    list.push_str("# Every knob, with the profile's value (`kvsim profiles` lists each profile's); uncomment one to change it:\n");
                    let profile = file.profile.clone().unwrap_or_else(|| "sglang-0.5.16".into());
                    let p = crate::config::profile(&profile).expect("shipped profiles exist");
                    let values = toml::Table::try_from((p.knobs)()).expect("knobs serialise");
                    let knob_props = resolve(&root, v).get("properties").cloned().unwrap_or_default();
                    for (kn, kv) in &values {
                        if t.contains_key(kn) {
                            continue;
                        }
                        let d =
                            knob_props.get(kn).and_then(|x| x.get("description")).and_then(Value::as_str).unwrap_or("");
                        list.push_str(&comment(d, ""));
                        let _ = writeln!(list, "#   {kn} = {kv}");
                    }
                }
                t.decor_mut().set_prefix(format!("\n{header}"));
                annotate_table(&root, r, t);
                let first = t.iter().find(|(_, i)| i.is_value()).map(|(key, _)| key.to_string());
                match first.and_then(|key| t.key_mut(&key)) {
                    Some(mut key) if !list.is_empty() => {
                        let own = key.leaf_decor().prefix().and_then(|p| p.as_str()).unwrap_or("").to_string();
                        key.leaf_decor_mut().set_prefix(format!("\n{list}{own}"));
                    }
                    // A table without keys: the list stays above its header.
                    _ => t.decor_mut().set_prefix(format!("\n{header}{list}")),
                }
            }
            toml_edit::Item::ArrayOfTables(a) => {
                let item_schema = resolve(&root, r.get("items").unwrap_or(&Value::Null)).clone();
                for (i, t) in a.iter_mut().enumerate() {
                    if i == 0 {
                        t.decor_mut().set_prefix(format!("\n{}", comment(&section_doc, "")));
                    }
                    annotate_table(&root, &item_schema, t);
                }
            }
            _ => {}
        }
    }
    let mut out = String::new();
    out.push_str(&comment(
        &format!(
            "Scenario `{name}`, {how}. Every section is present and every value explained; the reference is docs/scenario-format.md. Run it with `kvsim run {file_name}`. For editor validation and completion add, as the first line, `#:schema <path to docs/scenario.schema.json>`."
        ),
        "",
    ));
    if let Some(t) = &file.trace {
        out.push_str(&comment(&format!("The trace file `{}` is read relative to this file: point it at data/mooncake/conversation_trace.jsonl of a kvsim checkout.", t.file), ""));
    }
    out.push_str(&doc.to_string());
    out.push_str(&absent_sections(&file));
    out
}

/// The sections the scenario does not use, as commented examples (so that a starting scenario
/// shows every section, not only the ones its source has): scripted faults and the `[[expect]]`
/// entries `kvsim check` asserts; a generated workload and a trace are named with where to read
/// about them.
fn absent_sections(file: &ScenarioFile) -> String {
    let mut out = String::new();
    if file.faults.as_ref().is_none_or(|f| f.script.is_empty()) {
        out.push_str(
            "\n# [[faults.script]]: a fault at a given time (or on a request's transfer), instead of or beside the\n\
             # random ones of [faults]; each kind's fields are in docs/scenario-format.md. For example:\n\
             # [[faults.script]]\n\
             # kind = \"crash\"\n\
             # at_ms = 500\n\
             # node = \"decode-0\"\n\
             # restart_after_ms = 1000\n",
        );
    }
    if file.expect.is_empty() {
        out.push_str(
            "\n# [[expect]]: what `kvsim check` asserts about the run (an engine team's CI); each entry runs the\n\
             # scenario under its own `profile` / `set` and must assert something (`clean`, `violations`, `absent`,\n\
             # `requests` or `status`). For example:\n\
             # [[expect]]\n\
             # name = \"buggy\"\n\
             # violations = [\"cross_tenant_read\"]\n\
             # status = { \"0\" = 200 }\n\
             # [[expect]]\n\
             # name = \"fixed\"\n\
             # profile = \"sglang-0.5.22\"\n\
             # set = { router_on_prefill_error = \"cancel_decode\" }\n\
             # clean = true\n",
        );
    }
    if file.workload.is_none() && file.trace.is_none() {
        out.push_str(
            "\n# [workload] (requests drawn from distributions) or [trace] (a Mooncake or CSV trace) can stand\n\
             # instead of the [[request]] entries: see docs/scenario-format.md and `kvsim new NAME --like mooncake`.\n",
        );
    }
    out
}
