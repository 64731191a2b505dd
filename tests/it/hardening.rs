//! Issue 11's hardening, one test per defect: auth that fails closed, request ids that
//! cannot forge log fields, error classification, request body checks, bounded metric
//! labels, rate limits for traffic without a valid key, connection limits and timeouts.

use std::path::PathBuf;

use massgen::cli::ProductionArgs;
use massgen::cli::{Fatal, resolve_production};

use crate::support::{env_of, write};

fn production(
    keys_file: Option<PathBuf>,
    vars: &[(&str, &str)],
) -> Result<massgen::config::ProductionSettings, Fatal> {
    let args = ProductionArgs {
        api_keys_file: keys_file,
        ..ProductionArgs::default()
    };
    resolve_production(&args, &env_of(vars))
}

#[test]
fn a_key_source_without_keys_is_a_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty", "");
    let comments = write(dir.path(), "comments", "# rotated out\n\n   \n");
    for file in [&empty, &comments] {
        let e = production(Some(file.clone()), &[]).unwrap_err();
        assert_eq!(e.code, 2, "{}", e.message);
        assert!(
            e.message.contains(&file.display().to_string()),
            "{}",
            e.message
        );
    }
    let e = production(None, &[("MASSGEN_SERVER_API_KEYS", " , ,")]).unwrap_err();
    assert_eq!(e.code, 2);
    assert!(
        e.message.contains("MASSGEN_SERVER_API_KEYS"),
        "{}",
        e.message
    );
    // Keys from the variable do not excuse an empty file: the operator meant to add some.
    let e = production(Some(empty), &[("MASSGEN_SERVER_API_KEYS", "k-1")]).unwrap_err();
    assert_eq!(e.code, 2);
    // An empty variable is not given (as every other variable), and real keys still work.
    let open = production(None, &[("MASSGEN_SERVER_API_KEYS", "  ")]).unwrap();
    assert!(open.api_keys.is_empty());
    let keys = write(dir.path(), "keys", "# ops\nk-2\n");
    let p = production(Some(keys), &[("MASSGEN_SERVER_API_KEYS", "k-1, ,")]).unwrap();
    assert_eq!(p.api_keys.len(), 2);
}
