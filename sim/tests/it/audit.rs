//! `kvsim audit` over engine log excerpts: exit statuses, the generated scenario, messy logs.

use std::process::Command;

fn data(name: &str) -> String {
    format!("{}/tests/data/audit/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn audit(args: &[&str]) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("kvsim-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim")).arg("audit").args(args).current_dir(&dir).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn incident_pools_leak_on_the_vulnerable_profile() {
    let scen = std::env::temp_dir().join(format!("kvsim-audit-glm-{}.toml", std::process::id()));
    let (code, out, err) =
        audit(&[&data("glm_prefill_gap.log"), &data("glm_decode.log"), "--scenario-out", scen.to_str().unwrap()]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(out.contains("681,274 <= L < 1,048,576"), "{out}");
    assert!(out.contains("reproduce: kvsim run"), "{out}");
    let text = std::fs::read_to_string(&scen).unwrap();
    assert!(text.contains("pool_tokens = 681280") && text.contains("pool_tokens = 3145728"), "{text}");
    assert!(text.contains("prompt_tokens = 681274"), "a probe at the band's lower edge: {text}");
    let (code, out, _) = audit(&[
        &data("glm_prefill_gap.log"),
        &data("glm_decode.log"),
        "--profile",
        "sglang-0.5.22",
        "--scenario-out",
        scen.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(11), "{out}");
    assert!(out.contains("400"), "{out}");
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
    // vLLM: over-length prompts are rejected before scheduling; the gap does not leak.
    let (code, out, _) = audit(&[&data("vllm_producer.log"), &data("vllm_consumer.log"), "--profile", "vllm-nixl"]);
    assert!(matches!(code, Some(0) | Some(11)), "{out}");
}
