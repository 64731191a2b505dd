//! deploy/ and the Dockerfile, checked without a Docker engine or a cluster by
//! `deploy/validate.py` (Kubernetes schemas via the `kubernetes-validate` package, plus
//! cross-checks). `.ci/run` installs the package and sets MASSGEN_REQUIRE_PYTHON=1, so a
//! missing package fails there instead of skipping.

use std::process::Command;

#[test]
fn deploy_manifests_and_dockerfile_validate() {
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
        return;
    }
    let output = Command::new(&python)
        .arg("deploy/validate.py")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run deploy/validate.py");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("deploy checks: ok"), "{text}");
}
