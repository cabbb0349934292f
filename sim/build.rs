//! The model stamp (`kvsim::MODEL`): a digest of this crate's sources (`src/model_stamp.rs`), so
//! that a campaign's checkpoint records which model judged its runs and a resume by another kvsim
//! is refused instead of mixing two models' verdicts in one table (`Campaign::check_resumes`). Any
//! edit of `src/` changes it, a comment's too: conservative, never silently different.

#[path = "src/model_stamp.rs"]
mod model_stamp;

fn main() {
    // The package's folder as cargo gives it to this run, not as it was when the script was
    // compiled (`env!`): a script compiled in another checkout sharing the target folder (a fresh
    // clone's build, `.ci/run`) is reused, and read a folder that no longer existed, so every
    // later build stamped the empty digest whatever its sources.
    let root = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    println!("cargo:rerun-if-changed=src");
    let (digest, _) = model_stamp::digest(&src)
        .unwrap_or_else(|| panic!("no sources under {}: the model stamp would name nothing", src.display()));
    println!("cargo:rustc-env=KVSIM_MODEL={digest:016x}");
}
