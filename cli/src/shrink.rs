//! `kvsim shrink INPUT`: reduce a failing scenario (a scenario file, a trace, or a saved failure
//! directory) to a small scenario with the same signature, written with a header comment that
//! says where it came from and how to reproduce it.

use kvsim::config::SimConfig;
use kvsim::report::exit;

#[derive(clap::Args, Debug, Clone)]
pub struct ShrinkOpts {
    /// A scenario file, a trace file (`--trace`), or a folder of a `kvsim fuzz` corpus: a seed
    /// folder (`<corpus>/<signature>/seed-N`) or a signature folder (`<corpus>/<signature>`);
    /// either's signature is then kept unless `--signature` says otherwise.
    pub input: String,
    /// The signature to keep (default: a seed or signature folder's own, else the first
    /// cross-tenant one, else the first safety one).
    #[arg(long)]
    pub signature: Option<String>,
    /// Where to write the shrunk scenario (an existing file only with --force; never the input).
    #[arg(long, default_value = "shrunk.toml")]
    pub out: String,
    /// Overwrite the --out file if it exists.
    #[arg(long)]
    pub force: bool,
    /// At most this many simulation runs (at least 1).
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(1..))]
    pub budget: u32,
    /// Shrink a trace written by another kvsim version: its configuration is re-run under this
    /// one, unchecked (a trace of this version must replay to a match, as `kvsim replay` checks).
    #[arg(long)]
    pub any_version: bool,
    #[command(flatten)]
    pub opts: super::RunOpts,
}

/// A signature folder of a campaign (`<corpus>/<slug>/failure.json`: its saved seed's scenario)
/// or one of its seed folders (`<corpus>/<slug>/seed-N`, which holds its own `failure.json` and
/// `scenario.toml`), with the signature it was saved under.
fn signature_folder(dir: &std::path::Path) -> Result<Option<(String, String, String)>, String> {
    let fj = dir.join("failure.json");
    if !fj.is_file() {
        return Ok(None);
    }
    let f = super::read_failure(&fj)?;
    // A seed folder's own scenario (before, its `failure.json` sent the look-up to
    // `seed-N/seed-N/scenario.toml`, a file that does not exist).
    let own = dir.join("scenario.toml");
    let scenario = if own.is_file() { own } else { dir.join(format!("seed-{}", f.seed)).join("scenario.toml") };
    Ok(Some((scenario.to_string_lossy().into_owned(), f.signature, f.space)))
}

/// What `load_any` read: the configuration, the signature a signature or seed folder keeps, and
/// the knobs its campaign pinned with `--set` (`kvsim::shrink::pinned_knobs`).
pub struct Loaded {
    pub cfg: SimConfig,
    pub signature: Option<String>,
    pub pinned: Vec<String>,
    /// A trace whose run was judged by the noninterference check too (its header says so): its
    /// channel shows only with the check.
    pub noninterference: bool,
}

/// Loads a configuration from a scenario, a trace header, a seed folder or a signature folder
/// of a campaign; a folder also gives the signature to keep and its campaign's pins.
pub fn load_any(input: &str, opts: &super::RunOpts, any_version: bool) -> Result<Loaded, String> {
    let mut p = std::path::Path::new(input);
    // A `failure.json` stands for its folder.
    if p.file_name().is_some_and(|n| n == "failure.json") && p.is_file() {
        p = p.parent().unwrap_or(std::path::Path::new("."));
    }
    if p.is_dir() {
        if let Some((scenario, sig, space)) = signature_folder(p)? {
            let cfg = super::load(&scenario, opts).map_err(|e| e.to_string())?;
            let pinned = kvsim::shrink::pinned_knobs(&space);
            return Ok(Loaded { cfg, signature: Some(sig), pinned, noninterference: false });
        }
    }
    // A file kvsim saved for a signature (a campaign's `scenario.toml`, a shrunk case) keeps it,
    // as its folder would: a channel's case, shrunk as a file, read "clean, nothing to shrink".
    let signature = super::saved_signature(&super::saved_file(input, "scenario.toml")?);
    load_plain(input, opts, any_version).map(|(cfg, noninterference)| Loaded {
        cfg,
        signature,
        pinned: Vec::new(),
        noninterference,
    })
}

/// A scenario's or a trace's configuration, and whether the trace's header names the
/// noninterference check.
fn load_plain(input: &str, opts: &super::RunOpts, any_version: bool) -> Result<(SimConfig, bool), String> {
    let path = super::saved_file(input, "scenario.toml")?;
    if is_trace(&path) {
        // A trace's header is the run's whole configuration: overrides would make the shrunk
        // case another run's, so they are refused rather than dropped.
        let given: Vec<&str> = [
            ("--seed", opts.seed.is_some()),
            ("--profile", opts.profile.is_some()),
            ("--set", !opts.set.is_empty()),
            ("--liveness", opts.liveness.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        if !given.is_empty() {
            return Err(format!(
                "{path}: a trace carries its run's whole configuration, so {} cannot change it: shrink the \
                 scenario with them, or run it with them and --trace, then shrink that trace",
                given.join(", ")
            ));
        }
        let reader = super::tracefile::open(&path, kvsim::tracefile::ReadOptions { any_version: true })
            .map_err(|e| e.to_string())?;
        if let Some(cs) = &reader.header.choices {
            // Shrinking runs seeded schedules: this configuration without its choices is another
            // run (it shrank the default schedule's bug, or found none).
            return Err(format!(
                "{path}:1: the trace follows a schedule found by `kvsim explore` (header `choices`: {cs}); shrink \
                 reduces seeded runs: `kvsim explore SCENARIO --out FILE` writes the schedule's shrunk scenario \
                 and choice string"
            ));
        }
        let written_by = &reader.header.kvsim_version;
        if written_by != env!("CARGO_PKG_VERSION") && !any_version {
            return Err(format!(
                "{path}:1: written by kvsim {written_by}, this is kvsim {}: its configuration may run differently here (`kvsim replay --force {path}` compares); --any-version shrinks its configuration under this version anyway",
                env!("CARGO_PKG_VERSION")
            ));
        }
        if written_by != env!("CARGO_PKG_VERSION") {
            // Another version's records cannot be compared, but the file must still be a whole
            // trace: a cut or corrupted one is bad input here as everywhere (`replay --force`
            // refuses it too).
            let config = reader.header.config.clone();
            let ni = reader.header.noninterference.is_some();
            reader.read_to_footer().map_err(|e| e.to_string())?;
            return Ok((config, ni));
        }
        // The trace must be its own configuration's run, as `replay` and `confirm` check: an
        // edited header shrank another bug, and a cut or corrupted file was shrunk unread.
        match super::replay_trace(&path, false) {
            Ok(_) => {}
            Err(super::ReplayProblem::Bad(m)) => return Err(m),
            Err(super::ReplayProblem::Diverged(lines)) => {
                return Err(format!(
                    "{path}: the trace is not its own configuration's run (edited, or written by another build): {}; `kvsim replay {path}` shows the difference",
                    lines[0].trim_start_matches("replay ")
                ))
            }
        }
        let ni = reader.header.noninterference.is_some();
        return Ok((reader.header.config, ni));
    }
    let cfg = super::load(&path, opts).map_err(|e| e.to_string())?;
    super::check::expectations_ok(&path)?;
    Ok((cfg, false))
}

/// Whether `path` is a trace (JSON Lines: its first non-blank byte opens an object, which no
/// TOML scenario's does), whatever its name; `replay` and `confirm` take any name too.
fn is_trace(path: &str) -> bool {
    super::read_head(path, 256).is_some_and(|h| h.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
}

/// Picks the signature to shrink for.
pub fn pick_signature(sigs: &std::collections::BTreeSet<String>) -> Option<String> {
    sigs.iter()
        .find(|s| s.starts_with("cross_tenant_read/"))
        .or_else(|| sigs.iter().find(|s| kvsim::fuzz::is_safety(s)))
        .or_else(|| sigs.iter().next())
        .cloned()
}

/// The necessary knobs, and those the spent budget left unjudged (`none` when neither). With none
/// found and some unjudged it says the answer is unknown ("none; not judged …: a, b" read as a
/// contradiction).
fn knobs_line(s: &kvsim::shrink::Shrunk, none: &str) -> String {
    let unjudged = s.unjudged_knobs.join(", ");
    let raise = "raise `kvsim shrink --budget`, or a campaign's --shrink-budget";
    match (s.necessary_knobs.is_empty(), s.unjudged_knobs.is_empty()) {
        (true, true) => none.to_string(),
        (false, true) => s.necessary_knobs.join(", "),
        (true, false) => format!("not known: the run budget was spent before these were judged ({raise}): {unjudged}"),
        (false, false) => {
            format!("{}; not judged, the run budget was spent ({raise}): {unjudged}", s.necessary_knobs.join(", "))
        }
    }
}

/// What to say of a shrink the budget ended before a pass changed nothing.
fn unfinished(s: &kvsim::shrink::Shrunk, file: &str, budget: u32) -> String {
    if s.runs >= budget {
        format!(
            "Not minimal yet: the run budget ended shrinking after {} runs; a larger budget (`kvsim shrink --budget`, a campaign's --shrink-budget), or `kvsim shrink {file} --out …`, may shrink it further.",
            s.runs
        )
    } else {
        format!(
            "Not minimal yet: the pass limit ({} passes) ended shrinking after {} runs; `kvsim shrink {file} --out …` may shrink it further.",
            kvsim::shrink::MAX_PASSES,
            s.runs
        )
    }
}

/// Shrinks and renders the output file; returns (text, summary line).
/// `keep`: knobs never set back to the fixed build (a campaign's or the command's `--set` pins).
pub fn shrink_to_text(
    cfg: &SimConfig,
    sig: &str,
    budget: u32,
    origin: &str,
    keep: &[String],
) -> (String, kvsim::shrink::Shrunk) {
    let s = kvsim::shrink::shrink_keeping(cfg, sig, budget, keep);
    let tenants: std::collections::BTreeSet<u32> = s.cfg.requests.iter().map(|r| r.tenant).collect();
    let header = format!(
        "Shrunk by kvsim shrink from {origin} (seed {}, profile {}).\nSignature: {sig}\nNecessary knobs (against {}): {}\n{} request(s), {} tenant(s), {} prefill and {} decode node(s); {} runs, {} accepted.\nReproduce: kvsim run <this file>{}",
        cfg.seed,
        cfg.profile,
        s.judged_against,
        knobs_line(&s, "none of the behaviour knobs"),
        s.cfg.requests.len(),
        tenants.len(),
        s.cfg.prefill.len(),
        s.cfg.decode.len(),
        s.runs,
        s.accepted,
        kvsim::campaign::run_flags(sig)
    );
    let header = if s.converged { header } else { format!("{header}\n{}", unfinished(&s, "<this file>", budget)) };
    let mut out = s.cfg.clone();
    out.name = format!("{}-shrunk", cfg.name);
    (shrunk_toml(&out, &header), s)
}

/// A shrunk case as a scenario file whose `[knobs]` holds only the knobs that differ from its
/// profile (the rest come from `profile = …` when it is read back), so a reader sees what the
/// case changes. A configuration without a known profile keeps every knob.
fn shrunk_toml(cfg: &SimConfig, header: &str) -> String {
    kvsim::scenario::to_toml_against_profile(cfg, header)
}

pub fn run(o: &ShrinkOpts) -> i32 {
    let Loaded { cfg, signature: folder_sig, mut pinned, noninterference } =
        match load_any(&o.input, &o.opts, o.any_version) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
        };
    // `--signature`, else the signature of a signature folder: the shrunk case keeps it.
    let want = o.signature.clone().or(folder_sig);
    let check = want.as_deref().is_some_and(kvsim::fuzz::is_disagreement);
    let channel = noninterference || want.as_deref().is_some_and(kvsim::fuzz::is_channel);
    let (_, sigs) = kvsim::fuzz::run_case_with(cfg.clone(), check, channel);
    // A kind alone (or a signature less its chain) names the one shown signature it begins, as
    // `fuzz --until` takes one: `wrong_status` was refused beside `wrong_status/rejected_answered_200`.
    let begun: Vec<&String> = match &want {
        Some(s) if !sigs.contains(s) => sigs.iter().filter(|x| x.starts_with(&format!("{s}/"))).collect(),
        _ => Vec::new(),
    };
    let sig = match (&want, pick_signature(&sigs)) {
        (Some(s), _) if sigs.contains(s) => s.clone(),
        (Some(s), _) if begun.len() == 1 => {
            eprintln!("note: --signature {s}: the run's signature `{}`", begun[0]);
            begun[0].clone()
        }
        (Some(s), _) => {
            let shown: Vec<&str> = sigs.iter().map(String::as_str).collect();
            // Against the whole signatures, then their kinds (a misspelt kind had no hint).
            let kinds: Vec<&str> = shown.iter().map(|x| x.split('/').next().unwrap_or(x)).collect();
            let hint = kvsim::scenario::did_you_mean(s, shown.iter().copied())
                .or_else(|| kvsim::scenario::did_you_mean(s, kinds.iter().copied()))
                .map(|m| format!("; did you mean `{m}`?"))
                .unwrap_or_default();
            let several = if begun.len() > 1 { "; it begins several: give the whole `kind/mechanism`" } else { "" };
            eprintln!(
                "error: {}: the run does not show signature `{s}`{several}{hint} (it shows: {})",
                o.input,
                if shown.is_empty() { "none".to_string() } else { shown.join(", ") }
            );
            return exit::BAD_INPUT;
        }
        (None, Some(s)) => s,
        (None, None) => {
            if let Some(cs) = super::saved_choices(&o.input) {
                // A counterexample of `kvsim explore --out`: its failure needs its schedule.
                eprintln!(
                    "error: {}: a counterexample of kvsim explore: its violation shows under its schedule (`kvsim run {} --choices {}`), and shrink runs seeded schedules, where it is clean; `kvsim explore --out FILE` shrinks a counterexample with its schedule",
                    o.input,
                    kvsim::shell_path_str(&o.input),
                    kvsim::shell_word(&cs)
                );
                return exit::BAD_INPUT;
            }
            // Bad input for this command, not a success: a script saw exit 0 and no `--out` file.
            eprintln!(
                "error: {}: the run is clean (no signature to keep): nothing to shrink; {} not written",
                o.input, o.out
            );
            return exit::BAD_INPUT;
        }
    };
    // Refused before shrinking (the input was read and checked first): shrinking takes minutes,
    // and the file it would replace may be the case itself (`--out` naming the input) or another
    // shrunk case.
    if o.out.trim().is_empty() || std::path::Path::new(&o.out).is_dir() {
        eprintln!("error: --out {:?}: give the shrunk case's file name", o.out);
        return exit::BAD_INPUT;
    }
    let out = std::path::Path::new(&o.out);
    let same = |a: &std::path::Path, b: &std::path::Path| super::same_file(a, b);
    let input = std::path::Path::new(&o.input);
    let near = |f: &str| input.join(f);
    if same(out, input) || ["scenario.toml", "failure.json", "shrunk.toml"].iter().any(|f| same(out, &near(f))) {
        eprintln!("error: --out {}: that is the input; write the shrunk case elsewhere", o.out);
        return exit::BAD_INPUT;
    }
    if out.is_file() && !o.force {
        eprintln!("error: --out {}: the file exists; give --force to overwrite it, or another --out", o.out);
        return exit::BAD_INPUT;
    }
    // The command's own `--set` pins are kept as a campaign's are (checked by `load_any`).
    pinned.extend(kvsim::scenario::parse_set_flags(&o.opts.set).unwrap_or_default().into_iter().map(|(k, _)| k));
    let (text, s) = shrink_to_text(&cfg, &sig, o.budget, &o.input, &pinned);
    if let Err(e) = std::fs::write(&o.out, &text) {
        eprintln!("error: {}: {e}", o.out);
        return exit::BAD_INPUT;
    }
    let tenants: std::collections::BTreeSet<u32> = s.cfg.requests.iter().map(|r| r.tenant).collect();
    println!(
        "shrunk `{sig}` to {} request(s), {} tenant(s), {} prefill + {} decode node(s) in {} runs; necessary knobs (against {}): {}",
        s.cfg.requests.len(),
        tenants.len(),
        s.cfg.prefill.len(),
        s.cfg.decode.len(),
        s.runs,
        s.judged_against,
        knobs_line(&s, "none")
    );
    // The check that shows the signature goes with the command: a channel is seen only by the
    // noninterference check, a disagreement only by the reference oracle.
    let with = kvsim::campaign::run_flags(&sig);
    if !s.converged {
        println!("{}", unfinished(&s, &kvsim::shell_path_str(&o.out), o.budget));
    }
    println!("written to {}\nreproduce: kvsim run {}{with}", o.out, kvsim::shell_path_str(&o.out));
    // Judged with the check that shows the kept signature (a timing channel's shrunk case,
    // judged without the noninterference check, exited 11 as if it only hung).
    let (_, after) = kvsim::fuzz::run_case_with(s.cfg, check, channel);
    if after.iter().any(|x| kvsim::fuzz::is_disagreement(x)) {
        exit::ORACLE_DISAGREEMENT
    } else if after.iter().any(|x| kvsim::fuzz::is_safety(x) || kvsim::fuzz::is_channel(x)) {
        exit::SAFETY
    } else {
        exit::LIVENESS
    }
}
