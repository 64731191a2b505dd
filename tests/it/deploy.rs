//! deploy/ and the Dockerfile, checked without a Docker engine or a cluster by
//! `deploy/validate.py` (Kubernetes schemas via the `kubernetes-validate` package, plus
//! cross-checks). `.ci/run` installs the package and sets MASSGEN_REQUIRE_PYTHON=1, so a
//! missing package fails there instead of skipping.

use std::path::Path;
use std::process::Command;

/// The Python that has the validator's packages; `None` (the test skips) without them,
/// unless MASSGEN_REQUIRE_PYTHON is set.
fn python() -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = Command::new(&python)
        .args(["-c", "import yaml, kubernetes_validate"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "python packages missing: pip install -r tests/python/requirements.txt"
        );
        println!("skipped: python packages pyyaml/kubernetes-validate not installed");
        return None;
    }
    Some(python)
}

/// `deploy/validate.py [root]`: whether it passed, and what it printed.
fn validate(python: &str, root: Option<&Path>) -> (bool, String) {
    let mut cmd = Command::new(python);
    cmd.arg("deploy/validate.py")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(root) = root {
        cmd.arg(root);
    }
    let output = cmd.output().expect("run deploy/validate.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn deploy_manifests_and_dockerfile_validate() {
    let Some(python) = python() else { return };
    let (ok, text) = validate(&python, None);
    assert!(ok, "{text}");
    assert!(text.contains("deploy checks: ok"), "{text}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Replaces `from` (which must be there) by `to` in the file `root/path`.
fn edit(root: &Path, path: &str, from: &str, to: &str) {
    let file = root.join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(from), "{path} has no {from:?}");
    std::fs::write(file, text.replacen(from, to, 1)).unwrap();
}

/// The records layout's checks catch what would break replicas sharing records: each
/// mistake, made in a copy of deploy/ and the Dockerfile, is named.
#[test]
fn deploy_validation_catches_broken_shared_records() {
    let Some(python) = python() else { return };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_tree(&repo.join("deploy"), &root.join("deploy"));
    std::fs::copy(repo.join("Dockerfile"), root.join("Dockerfile")).unwrap();
    let (ok, text) = validate(&python, Some(root));
    assert!(ok, "the unchanged copy must pass: {text}");

    let mistakes = [
        (
            "deploy/k8s/secret.yaml",
            "url: \"postgres://massgen:replace-me@",
            "url: \"sqlite:///var/lib/massgen/records.db#",
            "k8s: replicas need a shared postgres:// records database",
        ),
        (
            "deploy/k8s/hpa.yaml",
            "minReplicas: 2",
            "minReplicas: 1",
            "k8s: fewer than 2 replicas",
        ),
        (
            "deploy/compose/haproxy.cfg",
            "timeout server 1h",
            "timeout server 30s",
            "haproxy: timeout server under 10 minutes",
        ),
        (
            "deploy/compose/db.env",
            "@postgres:5432",
            "x@postgres:5432",
            "db.env: the records URL's user, password or database differ",
        ),
        (
            "deploy/compose/docker-compose.yml",
            "expose: [\"4000\"]",
            "ports: [\"4001:4000\"]",
            "compose: massgen replicas publish ports",
        ),
        (
            "Dockerfile",
            "--chown=65532:65532 /records",
            "/records",
            "Dockerfile: /var/lib/massgen is not owned by the image's user",
        ),
    ];
    for (path, from, to, _) in mistakes {
        edit(root, path, from, to);
    }
    let (ok, text) = validate(&python, Some(root));
    assert!(!ok, "{text}");
    for (path, _, _, expected) in mistakes {
        assert!(
            text.contains(expected),
            "{path}: no {expected:?} in\n{text}"
        );
    }
}
