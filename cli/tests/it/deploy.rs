//! The files that build `kvsim` outside this test suite (the nightly workflow, the Kubernetes
//! image) build the binary they then take: the package they name has the `kvsim` binary, and the
//! path they take it from is that build profile's folder. (Both once named `-p kvsim`, the
//! library, after the command moved to its own crate, and built no binary at all.)

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root")
}

/// `(package, profile folder)` of every `cargo build` line in `text`.
fn builds(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("cargo build") else { continue };
        let words: Vec<&str> = line[at..].split_whitespace().take_while(|w| !w.starts_with('#')).collect();
        let after =
            |flag: &str| words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1)).map(|w| w.to_string());
        let package = after("-p").or_else(|| after("--package")).unwrap_or_else(|| panic!("no -p in {line:?}"));
        let profile = match after("--profile") {
            Some(p) => p,
            None if words.contains(&"--release") => "release".into(),
            None => "debug".into(),
        };
        out.push((package, profile));
    }
    out
}

/// The workspace member whose package is `name`: its manifest's text.
fn manifest_of(name: &str) -> String {
    for member in ["sim", "cli", "gpu-replay"] {
        let text = std::fs::read_to_string(root().join(member).join("Cargo.toml")).expect("a member's manifest");
        let table: toml::Table = text.parse().expect("a manifest parses");
        if table["package"]["name"].as_str() == Some(name) {
            return text;
        }
    }
    panic!("no workspace member is package {name:?}");
}

#[test]
fn deploy_files_build_the_binary_they_take() {
    let workspace: toml::Table =
        std::fs::read_to_string(root().join("Cargo.toml")).unwrap().parse().expect("the workspace manifest parses");
    for file in [".github/workflows/nightly-fuzz.yml", "deploy/k8s/Dockerfile"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let found = builds(&text);
        assert!(!found.is_empty(), "{file}: no cargo build line");
        for (package, profile) in found {
            let manifest: toml::Table = manifest_of(&package).parse().unwrap();
            let bins = manifest.get("bin").and_then(|b| b.as_array()).cloned().unwrap_or_default();
            assert!(
                bins.iter().any(|b| b.get("name").and_then(|n| n.as_str()) == Some("kvsim")),
                "{file}: package {package} has no `kvsim` binary"
            );
            if !matches!(profile.as_str(), "release" | "debug") {
                assert!(
                    workspace.get("profile").and_then(|p| p.get(&profile)).is_some(),
                    "{file}: profile {profile} is not in the workspace's Cargo.toml"
                );
            }
            assert!(
                text.contains(&format!("target/{profile}/kvsim")),
                "{file}: builds with profile {profile} but does not take target/{profile}/kvsim"
            );
        }
    }
}

#[test]
fn a_build_line_is_read_as_cargo_reads_it() {
    assert_eq!(builds("run: cargo build --release --locked -p kvsim"), [("kvsim".into(), "release".into())]);
    assert_eq!(
        builds("RUN cargo build --profile dist --locked -p kvsim-cli   # -p other"),
        [("kvsim-cli".to_string(), "dist".to_string())]
    );
}
