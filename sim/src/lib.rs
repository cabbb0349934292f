//! kvsim: a deterministic discrete-event model of disaggregated (prefill/decode) LLM serving,
//! with an oracle that knows who wrote every KV slot and flags reads that cross tenants.
//!
//! The library is pure: no wall clock, no threads, no file I/O. The `kvsim` binary does the I/O
//! around it. See ARCHITECTURE.md for the code map and invariants.

pub mod audit;
pub mod campaign;
pub mod check;
pub mod config;
pub mod confirm;
pub mod engine;
pub mod formats;
pub mod picture;
pub mod types;

// The flat paths the library has always had (`kvsim::world`, `kvsim::trace`, ...) stay valid:
// each names its module in the folder that shows where it sits in the architecture.
pub use campaign::{coverage, fuzz, fuzz_targets, reach, shrink, triage};
pub use check::{expect, explore};
pub use engine::{
    client, decode, event, extent, faults, intake, latency, lifecycle, metadata, pool, pp, prefill, prefix, reqs, rng,
    router, transfer, world,
};
pub use formats::{report, scenario, scenario_doc, trace, tracefile, workload_trace, xml};

/// The model stamp: a digest of this crate's sources (`build.rs`). A campaign's checkpoint
/// records it, and a resume or merge by a kvsim with another model is refused
/// (`CampaignError::OtherModel`): the version number stays 0.1.0 while the model changes.
pub const MODEL: &str = env!("KVSIM_MODEL");

// The stamp's digest, compiled here only for its test (`build.rs` computes the stamp).
#[cfg(test)]
mod model_stamp;

/// `kvsim --version`'s line: the version number and the model stamp.
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (model ", env!("KVSIM_MODEL"), ")");

use config::SimConfig;
use trace::{TraceSink, Tracer};
use world::World;

/// One word of a printed command (a reproduce command, a path, a `--set` pair), quoted for a POSIX
/// shell when it needs it, so the line can be pasted as it is: `dir with space/it's.toml` becomes
/// `'dir with space/it'"'"'s.toml'`. A word that cannot be quoted (a NUL byte, which no path or
/// argument holds) is returned as it is.
pub fn shell_word(s: &str) -> std::borrow::Cow<'_, str> {
    // Words of only these characters mean themselves to a POSIX shell as an argument; shlex
    // quotes some of them too (`=`, `:`, `,`), which made `--set 'page_tags=on'`.
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_./-=:,+@%".contains(&b);
    if !s.is_empty() && s.bytes().all(plain) {
        return std::borrow::Cow::Borrowed(s);
    }
    shlex::try_quote(s).unwrap_or(std::borrow::Cow::Borrowed(s))
}

/// A path as one word of a printed command (`shell_word` of its display form).
pub fn shell_path(p: &std::path::Path) -> String {
    shell_path_str(&p.display().to_string())
}

/// A path (given as text) as one word of a printed command: `shell_word`, and `./` before one
/// that starts with `-`, which the command would read as a flag (`kvsim run -dash.toml`).
pub fn shell_path_str(p: &str) -> String {
    if p.starts_with('-') {
        shell_word(&format!("./{p}")).into_owned()
    } else {
        shell_word(p).into_owned()
    }
}

/// Runs a configuration to the end and returns the finished world.
pub fn simulate(cfg: SimConfig, sink: Option<Box<dyn TraceSink>>, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::new(sink));
    w.check_invariants = check_invariants;
    w.run();
    w
}

/// Like `simulate`, with the differential check on: the reference oracle shadows every pool and
/// every read's verdict is compared with the fast oracle's (`w.reference`).
pub fn simulate_checked(cfg: SimConfig, sink: Option<Box<dyn TraceSink>>, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::new(sink));
    w.check_invariants = check_invariants;
    w.enable_reference();
    w.run();
    w
}

/// Like `simulate`, keeping every trace record in memory (`w.tracer.collected`).
pub fn simulate_collect(cfg: SimConfig, check_invariants: bool) -> World {
    let mut w = World::new(cfg, Tracer::collecting(None));
    w.check_invariants = check_invariants;
    w.run();
    w
}

/// The crate's folder as the test run sees it. `cargo test` sets `CARGO_MANIFEST_DIR` at run time;
/// the compile-time value can be stale when one target folder serves two checkouts (CI's fresh-clone
/// stage reuses the build of the in-place stage when the sources are identical).
#[cfg(test)]
pub(crate) fn test_manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
}

/// What an input's first bytes say it is when it is not UTF-8 text kvsim can read: gzip, UTF-16
/// (a byte-order mark), binary (a NUL byte: a device such as `/dev/zero` is refused from its first
/// bytes instead of read until memory runs out). `None` for text. Shared by every reader of input
/// files (scenarios, traces, catalogues).
pub fn sniff(head: &[u8]) -> Option<&'static str> {
    let head = &head[..head.len().min(4096)];
    if head.starts_with(&[0x1f, 0x8b]) {
        Some("gzip-compressed: decompress it first (e.g. `zcat FILE > FILE.txt`)")
    } else if head.starts_with(&[0xff, 0xfe]) || head.starts_with(&[0xfe, 0xff]) {
        Some("UTF-16 text (a byte-order mark): save it as UTF-8")
    } else if head.contains(&0) {
        Some("binary data (a NUL byte), not text (UTF-16 without a byte-order mark reads so too: save it as UTF-8)")
    } else {
        None
    }
}

#[cfg(test)]
mod shell_tests {
    /// A printed word pastes back as itself: plain words stay bare (`--set page_tags=on`), others
    /// are quoted so that a shell splits them back into the same argument.
    #[test]
    fn printed_words_paste_back_as_themselves() {
        for w in ["page_tags=on", "scenarios/small/stub-leak.toml", "v1/f=1/k=transfer_fail+crash/l=200+2000/o=1/c="] {
            assert_eq!(super::shell_word(w), w);
        }
        for w in ["dir with space/it's.toml", "corp <1>/x", "a;b", "$HOME", ""] {
            let q = super::shell_word(w);
            assert_ne!(q, w);
            assert_eq!(shlex::split(&q), Some(vec![w.to_string()]), "{q}");
        }
    }
}
