//! `kvsim audit` over engine log excerpts: exit statuses, the generated scenario, messy logs.

use std::process::Command;

fn data(name: &str) -> String {
    format!("{}/audit/{name}", crate::sim_data().display())
}

/// Runs `kvsim audit` in a working directory of its own.
fn audit(args: &[&str]) -> (Option<i32>, String, String) {
    audit_in(&crate::Scratch::new("audit"), args)
}

/// Runs `kvsim audit` with `dir` as the working directory.
fn audit_in(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim")).arg("audit").args(args).current_dir(dir).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh, empty working directory for one test.
fn empty_dir(tag: &str) -> crate::Scratch {
    crate::Scratch::new(&format!("audit-{tag}"))
}

fn files_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn incident_pools_leak_on_the_vulnerable_profile() {
    let dir = crate::Scratch::new("audit-glm");
    let scen = dir.join("glm.toml");
    let (code, out, err) =
        audit(&[&data("glm_prefill_gap.log"), &data("glm_decode.log"), "--scenario-out", scen.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("681,274 <= L < 1,048,576"), "{out}");
    assert!(out.contains("reproduce: kvsim run"), "{out}");
    let text = std::fs::read_to_string(&scen).unwrap();
    // Written by the toml serializer: read it back as a scenario.
    let sc = kvsim::scenario::Scenario::parse("gen.toml", &text).unwrap();
    assert_eq!(sc.spec.prefill.iter().map(|g| g.pool_tokens).collect::<Vec<_>>(), vec![681_280]);
    assert_eq!(sc.spec.decode.iter().map(|g| g.pool_tokens).collect::<Vec<_>>(), vec![3_145_728]);
    assert!(sc.spec.request.iter().any(|r| r.prompt_tokens == 681_274), "a probe at the band's lower edge: {text}");
    assert!(sc.spec.request.iter().any(|r| r.prompt_tokens == 1_048_575), "a probe at the band's upper edge: {text}");
    // An existing --scenario-out file is kept unless --force (as `kvsim new`).
    let (code, _, err) =
        audit(&[&data("glm_prefill_gap.log"), &data("glm_decode.log"), "--scenario-out", scen.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("exists; give another name, or --force"), "{err}");
    assert_eq!(std::fs::read_to_string(&scen).unwrap(), text);
    let (code, out, _) = audit(&[
        "--force",
        &data("glm_prefill_gap.log"),
        &data("glm_decode.log"),
        "--profile",
        "sglang-0.5.22",
        "--scenario-out",
        scen.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(11), "{out}");
    // Behind mini_lb (the profile's router) the band's probes get decode's 500 after its waiting timeout.
    assert!(out.contains("(probes answered HTTP 400 × 1, 500 × 1) (exit 11)"), "{out}");
    assert!(out.contains("note: the scenario's own run finds wrong_status/rejected_answered_5xx"), "{out}");
}

/// A 10M-token context over a 3M-token pool on the vulnerable build leaks. The generated
/// scenario once spaced its warm-ups at 30 µs a token, half what a 3M-token prefill takes under
/// the cost model: they queued, timed out, and the probes behind them never reached admission,
/// so the verdict was "does not leak" (exit 11).
#[test]
fn long_contexts_are_warmed_one_request_at_a_time_and_leak() {
    let dir = empty_dir("long");
    let log = dir.join("scout.log");
    std::fs::write(&log, sglang_log("prefill", 10_485_760, 64, 3_000_000, None)).unwrap();
    let (code, out, err) = audit_in(&dir, &["scout.log", "--scenario-out", "gen.toml"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("verdict: GAP LEAKS under sglang-0.5.16"), "{out}");
    // The warm-ups are shorter than the largest accepted prompt: a longer one would not finish
    // within half of decode's waiting timeout.
    assert!(out.contains("assumption: warm-up prompts of"), "{out}");
    assert!(warmups_served(&dir.join("gen.toml")), "every warm-up served");
    // The log itself is never the output, --force or not.
    let (code, _, err) = audit_in(&dir, &["scout.log", "--scenario-out", "scout.log", "--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("that is one of the logs"), "{err}");
    assert!(std::fs::read_to_string(&log).unwrap().contains("max_total_num_tokens=3000000"));
    // Nor is it `new --from-log`'s output (it was overwritten with --force).
    let new = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_kvsim")).current_dir(&dir).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = new(&["new", "scout", "--from-log", "scout.log", "--out", "scout.log", "--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("scout.log: that is the log scout.log"), "{err}");
    assert!(std::fs::read_to_string(&log).unwrap().contains("max_total_num_tokens=3000000"));
}

/// An sglang log pair: server arguments and the scheduler summary of one node.
fn sglang_log(mode: &str, ctx: u64, page: u64, pool: u64, version: Option<&str>) -> String {
    format!(
        "{}[x] server_args=ServerArgs(context_length={ctx}, page_size={page}, disaggregation_mode='{mode}')\n\
         [x TP0] max_total_num_tokens={pool}, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len={ctx}\n",
        version.map_or(String::new(), |v| format!("sglang version: {v}\n"))
    )
}

/// The generated traffic fits the decode nodes it meets: warm-ups fit the smallest decode pool
/// with decode's reserved tokens (they waited there forever, exit 13), and a probe decode can
/// never preallocate is the engine's answer (prealloc-never-fits), not a scenario that failed.
/// The prefill side's build picks the profile: a fixed prefill with an old decode does not leak.
#[test]
fn the_traffic_fits_decode_and_the_prefill_build_decides() {
    let dir = empty_dir("fits");
    let w = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    w("p.log", sglang_log("prefill", 262144, 32, 200_000, None));
    w("d.log", sglang_log("decode", 262144, 32, 200_032, None));
    let (code, out, err) = audit_in(&dir, &["p.log", "d.log"]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("probe(s) are never answered: decode cannot preallocate them"), "{out}");
    w("small.log", sglang_log("decode", 131072, 1, 60_000, None));
    let (code, out, err) = audit_in(&dir, &["small.log"]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("assumption: warm-up prompts of 59,471 tokens, not 59,993"), "{out}");
    // The printed command to write the scenario runs as printed, also once its file exists.
    for _ in 0..2 {
        let (_, out, _) = audit_in(&dir, &["p.log", "d.log"]);
        let cmd = out
            .lines()
            .find_map(|l| l.strip_prefix("scenario not written; to write it: kvsim "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string();
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let (code, out, err) = audit_in(&dir, &args);
        assert_eq!(code, Some(11), "{cmd}: {out}{err}");
    }
    let (_, again, _) = audit_in(&dir, &["p.log", "d.log"]);
    assert!(again.contains("--scenario-out kvsim-audit-scenario.toml --force"), "{again}");
    // A decode pool equal to the context: no gap, but the prompts the reserved decode tokens
    // push past the pool hang at decode, and a note says which.
    w("p300.log", sglang_log("prefill", 262144, 32, 300_000, None));
    w("d262.log", sglang_log("decode", 262144, 32, 262_144, None));
    let (code, out, _) = audit_in(&dir, &["p300.log", "d262.log"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("decode prompts of 261,633 to 262,137 tokens pass its admission but never fit its preallocation"),
        "{out}"
    );
    // Page sizes that differ between nodes: said, with the one simulated.
    w("p64.log", sglang_log("prefill", 131072, 64, 100_000, None));
    w("d1.log", sglang_log("decode", 131072, 1, 400_000, None));
    let (_, out, _) = audit_in(&dir, &["p64.log", "d1.log"]);
    assert!(
        out.contains("the logs give different page sizes (1, 64); the generated scenario uses the largest"),
        "{out}"
    );
    // A standalone server (`disaggregation_mode='null'`) says so, and how it is audited.
    w("mono.log", sglang_log("null", 131072, 1, 100_000, None));
    let (_, out, _) = audit_in(&dir, &["mono.log"]);
    assert!(
        out.contains("role either (standalone in the log)")
            && out.contains("a standalone server, neither prefill nor decode"),
        "{out}"
    );
    w("p22.log", sglang_log("prefill", 131072, 1, 100_000, Some("0.5.22")));
    w("d16.log", sglang_log("decode", 131072, 1, 400_000, Some("0.5.16")));
    let (code, out, err) = audit_in(&dir, &["p22.log", "d16.log"]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("profile: sglang-0.5.22") && out.contains("the nodes run different builds"), "{out}");
}

/// A pool from `--max-total-tokens` that is not a whole number of pages is rounded down as
/// sglang rounds it at start-up, and the band and the warm-ups follow the rounded pool (the
/// warm-ups were the unrounded pool's largest accepted prompt, which the rounded one rejects).
#[test]
fn a_pool_is_rounded_to_whole_pages_before_the_band() {
    let dir = empty_dir("round");
    std::fs::write(
        dir.join("launch.log"),
        "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --context-length 262144 --page-size 64 --max-total-tokens 100000 --disaggregation-mode prefill --tp 4\n",
    )
    .unwrap();
    let (code, out, err) = audit_in(&dir, &["launch.log", "--scenario-out", "gen.toml"]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("pool 100,000 tokens is not a whole number of 64-token pages: audited as 99,968"), "{out}");
    assert!(out.contains("GAP: prompts 99,962 <= L < 262,144"), "{out}");
    assert!(warmups_served(&dir.join("gen.toml")));
}

/// Whether every warm-up (tenant 0) of a generated scenario is answered 200 when it runs.
fn warmups_served(scenario: &std::path::Path) -> bool {
    let text = std::fs::read_to_string(scenario).unwrap();
    let sc = kvsim::scenario::Scenario::parse("gen.toml", &text).unwrap();
    let w = kvsim::simulate(sc.resolve(&Default::default()).unwrap(), None, false);
    let warmups: Vec<_> = w.reqs.iter().filter(|r| r.tenant().0 == 0).collect();
    !warmups.is_empty() && warmups.iter().all(|r| r.response().is_some_and(|x| x.status == 200))
}

#[test]
fn a_log_without_a_role_gets_a_verdict_and_says_what_it_assumed() {
    // One server's log, no disaggregation role: before, exit 2 "no prefill node found".
    let dir = empty_dir("norole");
    let (code, out, err) = audit_in(&dir, &[&data("sglang_input_too_long_issue4048.log")]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("role either (no role in the log)"), "{out}");
    assert!(out.contains("assumption: no decode node measured: ASSUMED the worst partner"), "{out}");
    assert!(out.contains("GAP: prompts 59,862 <= L < 163,840"), "{out}");
    // Nothing written unasked; the command that would write it is printed.
    assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
    assert!(
        out.contains("scenario not written; to write it: kvsim audit ") && out.contains("--scenario-out "),
        "{out}"
    );
    // The fixed profile refuses the band.
    let (code, out, _) = audit_in(&dir, &[&data("sglang_input_too_long_issue4048.log"), "--profile", "sglang-0.5.22"]);
    assert_eq!(code, Some(11), "{out}");
    assert!(files_in(&dir).is_empty());
}

/// The profile follows the sglang build the log names: an operator on 0.5.23 is not told that
/// the gap leaks (that was the vulnerable 0.5.16 profile, whatever the log said); a log without
/// a version still gets the worst case, said as an assumption.
#[test]
fn the_profile_follows_the_sglang_version_in_the_log() {
    let dir = empty_dir("version");
    let summary = "[2026-11-02 10:11:12] max_total_num_tokens=681280, chunked_prefill_size=8192, \
        max_prefill_tokens=16384, max_running_requests=128, context_len=1048576, available_gpu_mem=11.84 GB\n";
    let cases = [
        (Some("0.5.23"), 11, "profile: sglang-0.5.22 (sglang 0.5.23 retires a prompt rejected at intake"),
        (Some("0.5.20"), 10, "profile: sglang-0.5.16 (sglang 0.5.20 predates 0.5.21"),
        (None, 10, "profile: sglang-0.5.16 (ASSUMED: no sglang version in the logs"),
    ];
    for (version, want, line) in cases {
        let log = dir.join(format!("{}.log", version.unwrap_or("none")));
        let text = version.map(|v| format!("sglang version: {v}\n")).unwrap_or_default() + summary;
        std::fs::write(&log, text).unwrap();
        let (code, out, err) = audit_in(&dir, &[log.to_str().unwrap()]);
        assert_eq!(code, Some(want), "{version:?}: {out}{err}");
        assert!(out.contains(line), "{version:?}: {out}");
        let p = line.split(' ').nth(1).unwrap();
        assert!(out.contains(&format!("--profile {p} --scenario-out")), "{version:?}: {out}");
        // --profile overrides the version's choice, and no profile line is printed then.
        let (code, out, _) = audit_in(&dir, &[log.to_str().unwrap(), "--profile", "sglang-0.5.16"]);
        assert_eq!(code, Some(10), "{out}");
        assert!(!out.contains("profile: "), "{out}");
    }
}

/// sglang 0.5.23's small-pool warning: the served pool, and a build that has the intake fix,
/// even with no version line in the log.
#[test]
fn the_small_pool_warning_gives_the_served_pool_and_dates_the_build() {
    let (code, out, err) = audit(&[&data("sglang_small_pool_warning.log")]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("sglang >=0.5.23 · role either (no role in the log) · pool 681,280 tokens"), "{out}");
    assert!(out.contains("GAP: prompts 681,274 <= L < 1,048,576"), "{out}");
    assert!(out.contains("profile: sglang-0.5.22 (sglang >=0.5.23 retires a prompt rejected at intake"), "{out}");
}

#[test]
fn vllm_logs_use_vllm_admission_and_profile() {
    let (code, out, err) = audit(&[&data("vllm_pool_below_context_issue39734.log")]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("vLLM: the API server admits L + max_tokens <= max_model_len, so L <= 262,143"), "{out}");
    assert!(out.contains("GAP: prompts 76,641 <= L < 262,144 are admitted but can never be scheduled"), "{out}");
    assert!(out.contains("under vllm-nixl"), "{out}");
    // A log whose engine refused to start: nothing was served with that pool.
    let (code, out, _) = audit(&[&data("vllm_v0_error_issue2418.log")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("REFUSED TO START with this pool (line 4)") && out.contains("verdict: no gap served"),
        "{out}"
    );
    let (code, out, _) = audit(&[&data("vllm_blocks_concurrency_pr12569.log")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("block size 16 deduced"), "{out}");
}

#[test]
fn out_of_range_log_values_blame_the_log_line_not_a_generated_file() {
    // Before: a 3-token pool and a 2^64-1 context wrote an invalid scenario and reported
    // `kvsim-audit-scenario.toml:14: decode.pool_tokens`.
    let dir = empty_dir("range");
    let log = dir.join("tiny.log");
    std::fs::write(
        &log,
        "[2026-03-02 10:11:11] Load weight end.\n[2026-03-02 10:11:12] max_total_num_tokens=3, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=18446744073709551615\n",
    )
    .unwrap();
    let (code, out, err) = audit_in(&dir, &[log.to_str().unwrap(), "--role", "prefill", "--scenario-out", "s.toml"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&format!("{}:2: `context_len`", log.display())), "{err}");
    assert!(!err.contains("s.toml") && !err.contains("kvsim-audit-scenario"), "{err}");
    std::fs::write(
        &log,
        "[2026-03-02 10:11:12] max_total_num_tokens=3, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=4096\n",
    )
    .unwrap();
    let (code, _, err) = audit_in(&dir, &[log.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("{}:1: `pool_tokens`: 3 tokens", log.display())), "{err}");
    assert_eq!(files_in(&dir), vec!["tiny.log".to_string()]);
}

#[test]
fn ranks_that_agree_are_one_node() {
    // DP attention: two DP ranks with the same pool, one without the summary line.
    let (_, out, _) = audit(&[&data("sglang_dp_attention.log")]);
    assert!(out.contains("2 ranks (DP0 TP0 EP0, DP1 TP1 EP1) agree"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains("sglang_dp_attention.log") && l.contains("(line ")).count(),
        1,
        "{out}"
    );
    // DP ranks with different pools stay apart.
    let (_, out, _) = audit(&[&data("sglang_decode_dp2_ansi.log")]);
    assert!(out.contains("the ranks disagree"), "{out}");
}

#[test]
fn pool_larger_than_context_is_no_gap() {
    let (code, out, _) = audit(&[&data("sglang_prefill_single.log")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("no gap"));
}

#[test]
fn messy_logs_and_bad_input() {
    let (code, _, err) = audit(&[&data("garbage.log")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("garbage.log"), "{err}");
    let (code, _, _) = audit(&["/nonexistent.log"]);
    assert_eq!(code, Some(2));
    let (code, _, err) = audit(&[
        &data("vllm_producer.log"),
        &data("vllm_consumer.log"),
        "--role",
        "prefill",
        "--role",
        "decode",
        "--role",
        "decode",
    ]);
    assert_eq!(code, Some(2), "{err}");
    // Interleaved DP ranks with colours: one line per rank.
    let (_, out, _) = audit(&[&data("sglang_decode_dp2_ansi.log"), "--role", "prefill"]);
    assert!(out.contains("DP0 TP0") && out.contains("DP1 TP0"), "{out}");
    assert!(!out.contains('\u{1b}'), "colour codes stripped");
    // Several launches: the last one is audited and the note says so.
    let (_, out, _) = audit(&[&data("sglang_two_launches.log"), "--role", "prefill"]);
    assert!(out.contains("launches found; auditing the last one"), "{out}");
    // A log without the summary line: context unknown is reported, not guessed.
    let (code, out, err) = audit(&[&data("sglang_kv_only.log"), "--role", "prefill"]);
    assert!(out.contains("context unknown"), "{out}");
    assert_eq!(code, Some(2), "{err}");
    // Beside a log that gives them, it is audited with that log's context and page size, said so
    // (it read "page size unknown" beside a note rounding its pool to the other log's pages).
    let (_, out, _) = audit(&[&data("sglang_kv_only.log"), &data("glm_prefill_gap.log")]);
    assert!(out.contains("context 1,048,576 (another log's) · page size 64 (another log's)"), "{out}");
    assert!(
        out.contains("its log gives no context length: audited with 1,048,576 from ")
            && out.contains("glm_prefill_gap.log (the logs are taken as one deployment's)"),
        "{out}"
    );
    // vLLM: over-length prompts are rejected before scheduling; the gap does not leak.
    let (code, out, _) = audit(&[&data("vllm_producer.log"), &data("vllm_consumer.log"), "--profile", "vllm-nixl"]);
    assert!(matches!(code, Some(0) | Some(11)), "{out}");
    // A vLLM log with an sglang log is no deployment: refused (it was simulated as sglang with
    // the sglang log's context, and called a leak), naming the later log's engine line and the
    // earlier one's, whichever order they come in.
    let (vllm, sglang) = (data("vllm_pool_below_context_issue39734.log"), data("glm_decode.log"));
    let (code, out, err) = audit(&[&vllm, &sglang]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("glm_decode.log:3: `engine`: this log is sglang's, while"), "{err}");
    assert!(err.contains("issue39734.log (line 4) is vllm's") && out.is_empty(), "{out}{err}");
    let (code, _, err) = audit(&[&sglang, &vllm, "--profile", "vllm-nixl"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("issue39734.log:4: `engine`: this log is vllm's, while"), "{err}");
    // Compressed, UTF-16 and cut-off logs say what they are.
    let dir = empty_dir("messy");
    let text = std::fs::read_to_string(data("glm_prefill_gap.log")).unwrap();
    let gz = dir.join("p.log.gz");
    std::fs::write(&gz, [&[0x1f, 0x8b, 8, 0][..], b"junk"].concat()).unwrap();
    let (code, _, err) = audit_in(&dir, &["p.log.gz"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("a compressed file"), "{err}");
    let utf16: Vec<u8> = [0xff, 0xfe].into_iter().chain(text.encode_utf16().flat_map(u16::to_le_bytes)).collect();
    std::fs::write(dir.join("p16.log"), utf16).unwrap();
    let (code, _, err) = audit_in(&dir, &["p16.log"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("UTF-16"), "{err}");
    std::fs::write(
        dir.join("cut.log"),
        "[x] max_total_num_tokens=681280, chunked_prefill_size=16384, max_prefill_tokens=16384, max_running_requests=64, context_len=10485",
    )
    .unwrap();
    let (code, out, _) = audit_in(&dir, &["cut.log", "--scenario-out", "s.toml"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("its last line has no line end and ends in a number (`…"), "{out}");
    // No gap: nothing to write, and it says so.
    assert!(out.contains("--scenario-out not written") && !dir.join("s.toml").exists(), "{out}");
    // A last line that ends in a word with a digit (`TP0`) is not a cut-off number.
    std::fs::write(dir.join("word.log"), format!("{text}[2025-03-03 06:49:28 TP0")).unwrap();
    let (_, out, _) = audit_in(&dir, &["word.log"]);
    assert!(!out.contains("ends in a number"), "{out}");
    // vLLM blocks without a block size anywhere: the pool at vLLM's default block size, said as
    // an assumption (it was "no usable KV pool size" after the note that 16 was used).
    std::fs::write(
        dir.join("blocks.log"),
        "INFO 05-20 10:00:01 llm_engine.py:72] Initializing an LLM engine (v0.6.3) with config: model='m', max_seq_len=4096, kv_role=kv_producer\n\
         INFO 05-20 10:00:40 gpu_executor.py:122] # GPU blocks: 200, # CPU blocks: 512\n",
    )
    .unwrap();
    let (code, out, err) = audit_in(&dir, &["blocks.log"]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(out.contains("ASSUMED: pool = 200 GPU blocks × block size 16 = 3200 tokens"), "{out}");
    // Two pools in one rank's launch, and one log given twice: both said.
    std::fs::write(
        dir.join("two.log"),
        "[x] server_args=ServerArgs(context_length=262144, page_size=32, disaggregation_mode='prefill')\n\
         [x TP0] KV Cache is allocated. #tokens: 200000, K size: 10.1 GB\n[x TP0] KV Cache is allocated. #tokens: 150000, K size: 1 GB\n",
    )
    .unwrap();
    let (_, out, _) = audit_in(&dir, &["two.log", "./two.log"]);
    // The smaller is audited whichever came first (the first was: the verdict hung on the order
    // the ranks' lines were logged in, and a gap a later line showed passed).
    assert!(
        out.contains("two pools: line 3 gives 150000, line 2 gives 200000; the smaller, line 3's, is audited"),
        "{out}"
    );
    assert!(out.contains("pool 150,000 tokens"), "{out}");
    assert!(out.contains("note: ./two.log is two.log again"), "{out}");
}

/// One file holding both engines' start-ups is refused as two files are (the earlier launch was
/// dropped as a restart of the later one: a leaking sglang prefill node vanished behind a vLLM
/// launch, exit 11 instead of 10).
#[test]
fn one_file_with_both_engines_is_refused() {
    let dir = empty_dir("both-engines");
    let sglang = "[2026-03-02 10:00:00] server_args=ServerArgs(context_length=1048576, page_size=64, disaggregation_mode='prefill')\n\
                  [2026-03-02 10:00:30 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, context_len=1048576\n";
    let vllm = "INFO 03-02 11:00:01 [api_server.py:1395] vLLM API server version 0.10.1.1\n\
                INFO 03-02 11:00:40 [kv_cache_utils.py:716] GPU KV cache size: 50,128 tokens\n";
    for (name, text) in [("sv.log", format!("{sglang}{vllm}")), ("vs.log", format!("{vllm}{sglang}"))] {
        std::fs::write(dir.join(name), text).unwrap();
        let (code, out, err) = audit_in(&dir, &[name]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.contains("`engine`") && err.contains("one prefill/decode deployment runs one engine"), "{err}");
    }
}

/// An input with no start-up lines is named for what it is when that is why: empty, or bytes
/// no log holds (it said only "no sglang or vLLM start-up lines found").
#[test]
fn an_empty_or_binary_log_is_named() {
    let dir = empty_dir("not-a-log");
    let utf16: Vec<u8> = "[2026-03-02 10:00:00] server_args=ServerArgs(context_length=4096)\n"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    for (name, bytes, says) in [
        ("empty.log", b" \n\n".to_vec(), "(an empty file)"),
        ("utf16.log", utf16, "(it holds NUL bytes: binary data, or UTF-16 text without a byte-order mark"),
        ("plain.log", b"hello\n".to_vec(), "start-up lines found"),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap();
        let (code, out, err) = audit_in(&dir, &[name]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.contains("no sglang or vLLM start-up lines found") && err.contains(says), "{name}: {err}");
    }
}

/// A log whose pool cannot be told (a zero block count) is bad input naming the log and the
/// fact it lacks, not "a node's pool or context length is unknown".
#[test]
fn a_log_without_a_usable_pool_is_named_with_what_it_lacks() {
    let dir = empty_dir("zero-blocks");
    let text = std::fs::read_to_string(data("vllm_blocks_concurrency_pr12569.log")).unwrap();
    assert!(text.contains("# GPU blocks: 1381"));
    let log = dir.join("zero.log");
    std::fs::write(&log, text.replace("# GPU blocks: 1381", "# GPU blocks: 0")).unwrap();
    let (code, _, err) = audit(&[log.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("zero.log: no usable KV pool size"), "{err}");
}

/// Options are checked before the report is printed: an unknown `--profile` or a folder as
/// `--scenario-out` is bad input with nothing on stdout.
#[test]
fn bad_options_are_refused_before_the_report() {
    let log = data("vllm_blocks_concurrency_pr12569.log");
    for extra in [&["--profile", "nope"][..], &["--scenario-out", std::env::temp_dir().to_str().unwrap()]] {
        let (code, out, err) = audit(&[&[log.as_str()][..], extra].concat());
        assert_eq!(code, Some(2), "{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(extra[0]), "{err}");
    }
}

/// One file holding a whole deployment's start-ups (a prefill and a decode launch, joined) is
/// two servers, not a restart: both are audited, in either order, with the same verdict as the
/// two files given apart. Before, only the last launch was audited and the prefill node with the
/// gap was dropped: "no gap", exit 0.
#[test]
fn launches_of_different_roles_in_one_file_are_each_audited() {
    let dir = empty_dir("joined");
    let read = |n: &str| std::fs::read_to_string(data(n)).unwrap();
    let (p, d) = (read("glm_prefill_gap.log"), read("glm_decode.log"));
    for (name, text) in [("pd.log", format!("{p}{d}")), ("dp.log", format!("{d}{p}"))] {
        std::fs::write(dir.join(name), text).unwrap();
        let (code, out, err) = audit_in(&dir, &[name]);
        assert_eq!(code, Some(10), "{name}: {out}{err}");
        assert!(out.contains("2 launches found; auditing the last of each role"), "{out}");
        assert!(out.contains("role prefill · pool 681,280 tokens") && out.contains("role decode"), "{out}");
    }
}

/// Two launches of one server joined newest first: the audit is of the launch that runs now (the
/// later in time), not of the one printed last. Before, the older launch's small pool was audited:
/// "GAP LEAKS", exit 10, for a server whose pool holds the whole context.
#[test]
fn launches_joined_newest_first_audit_the_newest() {
    let dir = empty_dir("rev");
    let launch = |hour: &str, pool: u64| {
        format!(
            "[2026-05-11 {hour}:01:02 DP0 TP0] server_args=ServerArgs(model_path='m', context_length=131072, page_size=64, disaggregation_mode='prefill')\n\
             [2026-05-11 {hour}:04:12 DP0 TP0] max_total_num_tokens={pool}, chunked_prefill_size=16384, max_prefill_tokens=16384, max_running_requests=64, context_len=131072\n"
        )
    };
    std::fs::write(dir.join("rev.log"), format!("{}{}", launch("02", 262_144), launch("01", 100_032))).unwrap();
    let (code, out, err) = audit_in(&dir, &["rev.log"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("pool 262,144 tokens"), "{out}");
    assert!(
        out.contains("2 launches found, out of time order in the file (ordered by their timestamps); auditing the latest one (line 2)"),
        "{out}"
    );
}

/// A node whose scheduler accepts no prompt at all says so (it said "no gap" and nothing more).
#[test]
fn a_node_that_accepts_no_prompt_says_so() {
    let dir = empty_dir("none");
    std::fs::write(dir.join("tiny.log"), sglang_log("prefill", 7, 1, 7, None)).unwrap();
    let (code, out, err) = audit_in(&dir, &["tiny.log"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("largest prompt accepted 0 tokens: this node serves no prompt at all"), "{out}");
}

/// The version as a log of its own (`python -m sglang.check_env`, as the README says to add)
/// dates every node without one; it is not a node. A version for some nodes only names the
/// nodes without one when it assumes the worst.
#[test]
fn a_version_file_applies_to_every_node() {
    let dir = empty_dir("version");
    std::fs::write(dir.join("env.txt"), "sglang: 0.5.22\n").unwrap();
    let (code, out, err) = audit_in(&dir, &["env.txt", &data("glm_prefill_gap.log"), &data("glm_decode.log")]);
    assert_eq!(code, Some(11), "{out}{err}");
    assert!(
        out.contains("env.txt: a sglang version (0.5.22) and no server facts: applied to the 2 sglang node(s) whose log gives no version"),
        "{out}"
    );
    assert!(out.contains("profile: sglang-0.5.22 (sglang 0.5.22 retires"), "{out}");
    assert!(!out.contains("env.txt (line"), "not a node: {out}");
    // `pip freeze` and `pip list` lines name the version too (they were "no start-up lines").
    for (name, line) in [
        ("freeze.txt", "torch==2.9.1\nsglang[all]==0.5.22\n"),
        ("list.txt", "Package    Version\n---------- -------\nsglang     0.5.22\n"),
    ] {
        std::fs::write(dir.join(name), line).unwrap();
        let (code, out, err) = audit_in(&dir, &[name, &data("glm_prefill_gap.log"), &data("glm_decode.log")]);
        assert_eq!(code, Some(11), "{name}: {out}{err}");
        assert!(out.contains("profile: sglang-0.5.22"), "{name}: {out}");
    }
    // A version of the other engine dates no node, and says so (it said "applied to every node
    // whose log gives no version" beside the node's "sglang version unknown").
    std::fs::write(dir.join("vllm.txt"), "INFO 10-14 08:12:30 [api_server.py:1839] vLLM API server version 0.10.2\n")
        .unwrap();
    let (_, out, err) = audit_in(&dir, &["vllm.txt", &data("glm_prefill_gap.log")]);
    assert!(
        out.contains("vllm.txt: a vllm version (0.10.2) and no server facts: not applied: no node is vllm's (the 1 node(s) whose log gives no version are sglang's)"),
        "{out}{err}"
    );
    assert!(out.contains("sglang version unknown"), "{out}");
    let p = std::fs::read_to_string(data("glm_prefill_gap.log")).unwrap();
    std::fs::write(dir.join("p22.log"), format!("Name: sglang\nVersion: 0.5.22\n{p}")).unwrap();
    // The prefill side's build decides (a rejected prompt is retired, or not, at its intake): a
    // 0.5.22 prefill with a decode of no stated version does not leak...
    let (code, out, _) = audit_in(&dir, &["p22.log", &data("glm_decode.log")]);
    assert_eq!(code, Some(11), "{out}");
    assert!(out.contains("profile: sglang-0.5.22"), "{out}");
    // ...and a prefill of no stated version is the worst case, named, whatever decode runs.
    let d = std::fs::read_to_string(data("glm_decode.log")).unwrap();
    std::fs::write(dir.join("d22.log"), format!("Name: sglang\nVersion: 0.5.22\n{d}")).unwrap();
    let (code, out, _) = audit_in(&dir, &[&data("glm_prefill_gap.log"), "d22.log"]);
    assert_eq!(code, Some(10), "{out}");
    assert!(
        out.contains("ASSUMED: 1 sglang node(s) give no version (") && out.contains("glm_prefill_gap.log)"),
        "{out}"
    );
}

/// With two decode nodes, only one of which is smaller than the context, the band's probes reach
/// both (round robin, lcm(P, D) copies): the small node answers 400 to both probes, the large
/// one serves the band's upper edge. Before, one copy went to whichever node it met.
#[test]
fn probes_reach_every_decode_node() {
    let dir = empty_dir("probes");
    let read = |n: &str| std::fs::read_to_string(data(n)).unwrap();
    std::fs::write(dir.join("p.log"), read("glm_prefill_gap.log").replace("681280", "2040000")).unwrap();
    std::fs::write(dir.join("d0.log"), read("glm_decode.log").replace("3145728", "681280")).unwrap();
    for order in [["d0.log", &data("glm_decode.log")], [&data("glm_decode.log"), "d0.log"]] {
        let (code, out, err) = audit_in(&dir, &["p.log", order[0], order[1], "--scenario-out", "s.toml"]);
        assert_eq!(code, Some(11), "{out}{err}");
        assert!(out.contains("(probes answered HTTP 200 × 1, 400 × 3)"), "{out}");
        let text = std::fs::read_to_string(dir.join("s.toml")).unwrap();
        let probes = text.matches("tenant = 1").count();
        assert_eq!(probes, 4, "two edges × two decode nodes: {text}");
        std::fs::remove_file(dir.join("s.toml")).unwrap();
    }
}

/// Smaller audit defects, each once: the vLLM scenario's warm-up is served by the simulation
/// (it used the largest prompt vLLM accepts, which the simulation refuses, so the pools stayed
/// cold); a refused start says so on the node's line instead of "no gap: the pool holds any
/// prompt"; `--role` against the log's role is noted; the scheduler summary's short form
/// (`max_total_num_tokens=…, context_len=…`) is read.
#[test]
fn vllm_warm_up_refused_start_role_and_short_summary() {
    let dir = empty_dir("small");
    let (code, out, _) = audit_in(&dir, &[&data("vllm_pool_below_context_issue39734.log"), "--scenario-out", "v.toml"]);
    assert_eq!(code, Some(11), "{out}");
    let cfg = kvsim::scenario::Scenario::parse("v.toml", &std::fs::read_to_string(dir.join("v.toml")).unwrap())
        .and_then(|s| s.resolve(&Default::default()))
        .unwrap();
    let w = kvsim::simulate(cfg, None, false);
    let warm_ok = w.reqs.iter().filter(|r| r.tenant().0 == 0 && r.response().is_some_and(|x| x.status == 200)).count();
    assert_eq!(warm_ok, w.reqs.iter().filter(|r| r.tenant().0 == 0).count(), "every warm-up request is served");
    let (code, out, _) = audit_in(&dir, &[&data("vllm_v0_error_issue2418.log")]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("no gap served: the pool is smaller than one request of the context"), "{out}");
    assert!(!out.contains("the pool holds any prompt"), "{out}");
    let (_, out, _) = audit_in(&dir, &[&data("glm_prefill_gap.log"), &data("glm_decode.log"), "--role", "decode"]);
    assert!(out.contains("--role decode replaces the role the log states (prefill)"), "{out}");
    std::fs::write(dir.join("s.log"), "[2024-10-01 10:00:00 TP0] max_total_num_tokens=681280, context_len=1048576\n")
        .unwrap();
    let (code, out, err) = audit_in(&dir, &["s.log"]);
    assert!(matches!(code, Some(10) | Some(11)), "{out}{err}");
    assert!(out.contains("pool 681,280 tokens · context 1,048,576"), "{out}");
}

/// Re-test findings: with two prefill and two decode nodes, round robin meets only two of the
/// four pairs, so the gap prefill node met the tiny decode pool or the large one by the order
/// of the logs (exit 11 or 10). Both arrangements are simulated now: exit 10 in any order. A
/// version file alone is bad input (it was "no gap served", exit 0). A launch dropped as a
/// restart that had a gap is named.
#[test]
fn verdicts_do_not_depend_on_the_order_of_the_logs() {
    let dir = empty_dir("order");
    let read = |n: &str| std::fs::read_to_string(data(n)).unwrap();
    std::fs::write(dir.join("p_big.log"), read("glm_prefill_gap.log").replace("681280", "4000000")).unwrap();
    std::fs::write(dir.join("d_tiny.log"), read("glm_decode.log").replace("3145728", "600000")).unwrap();
    let (gap, big) = (data("glm_prefill_gap.log"), data("glm_decode.log"));
    for order in [[&gap, "p_big.log", "d_tiny.log", &big], [&gap, "p_big.log", &big, "d_tiny.log"]] {
        let (code, out, err) = audit_in(&dir, &order);
        assert_eq!(code, Some(10), "{order:?}: {out}{err}");
        assert!(out.contains("2 arrangements of the decode nodes simulated"), "{out}");
    }
    std::fs::write(dir.join("ver.txt"), "sglang: 0.5.22\n").unwrap();
    let (code, _, err) = audit_in(&dir, &["ver.txt"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ver.txt:1: `version`: only a version in the logs"), "{err}");
    std::fs::write(
        dir.join("pdp.log"),
        format!(
            "{}{}{}",
            read("glm_prefill_gap.log"),
            read("glm_decode.log"),
            read("glm_prefill_gap.log").replace("681280", "4000000")
        ),
    )
    .unwrap();
    let (code, out, _) = audit_in(&dir, &["pdp.log"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("an earlier launch (prefill, pool 681,280 tokens) had a GAP"), "{out}");
    // A restart of a launch whose DP ranks agree: its note once, not once per rank; a launch
    // with no role in its log is "either role", as the node lines say (it read "unknown").
    let ranks = "[2025-11-03 08:12:01] server_args=ServerArgs(context_length=1048576, dp_size=2, enable_dp_attention=True, page_size=64)\n\
                 [2025-11-03 08:13:55 DP0 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, context_len=1048576\n\
                 [2025-11-03 08:13:55 DP1 TP1] max_total_num_tokens=681280, chunked_prefill_size=8192, context_len=1048576\n";
    let restart = ranks.replace("08:1", "09:1").replace("681280", "2097152");
    std::fs::write(dir.join("restarts.log"), format!("{ranks}{restart}")).unwrap();
    let (_, out, _) = audit_in(&dir, &["restarts.log"]);
    assert_eq!(
        out.matches("an earlier launch (either role: none in the log, pool 681,280 tokens) had a GAP").count(),
        1,
        "{out}"
    );
}

/// A log read from a pipe cannot be read again: the printed command says to save it first (it
/// printed `kvsim audit /dev/fd/63 …` as if it would run).
#[test]
fn a_piped_log_is_named_as_one_to_save_before_the_printed_command() {
    use std::io::Write;
    let log = sglang_log("prefill", 1_048_576, 64, 681_280, Some("0.5.16"));
    let dir = empty_dir("piped");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["audit", "/dev/stdin"])
        .current_dir(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(log.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(10), "{stdout}");
    assert!(
        stdout.contains("save /dev/stdin as saved-log-1.txt (read from a pipe")
            && stdout.contains("run: kvsim audit saved-log-1.txt "),
        "{stdout}"
    );
    // A log in a file gets the plain command.
    let file = dir.join("p.log");
    std::fs::write(&file, &log).unwrap();
    let (code, stdout, _) = audit_in(&dir, &[file.to_str().unwrap()]);
    assert_eq!(code, Some(10));
    assert!(stdout.contains("scenario not written; to write it: kvsim audit "), "{stdout}");
}

/// Two impossible inputs named for what they are: sglang's maximum allowed length above what its
/// context permits (it read as "no usable KV pool size"), and a vLLM pool of 0 tokens (its
/// message explained sglang's start-up rule).
#[test]
fn impossible_facts_are_named_for_their_engine() {
    let dir = empty_dir("impossible");
    std::fs::write(
        dir.join("max.log"),
        "python -m sglang.launch_server --context-length 4096\n\
         [2025-03-03 06:49:28 TP0] Input length (5000 tokens) exceeds the maximum allowed length (9000 tokens). Use a shorter input.\n",
    )
    .unwrap();
    let (code, _, err) = audit_in(&dir, &["max.log"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("max.log:2: `max_req_input_len`: the maximum allowed length 9,000 tokens is impossible"),
        "{err}"
    );
    assert!(err.contains("at most 4,090"), "{err}");
    std::fs::write(
        dir.join("v0.log"),
        "INFO 10-14 08:12:30 [api_server.py:1839] vLLM API server version 0.10.2\n\
         INFO 10-14 08:13:50 [kv_cache_utils.py:1087] GPU KV cache size: 0 tokens\n",
    )
    .unwrap();
    let (code, _, err) = audit_in(&dir, &["v0.log"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("v0.log:2: `pool_tokens`: 0 tokens: too small to be a started vLLM server's KV cache"),
        "{err}"
    );
    assert!(!err.contains("sglang"), "{err}");
}
