//! `massgen/path:<file>`: a panel file a request names (`--allow-config-paths`).
//!
//! Rules (docs/production.md, "Access control"):
//! - only `.yaml`/`.yml` files under the root (`--config-paths-root`, else `--configs-dir`),
//!   resolved with every symlink followed, so neither `..` nor a link leads out;
//! - never a file under a folder the server writes (`--records-dir`, the SQLite database's
//!   folder): start-up refuses a root that holds one of them or lies inside one, and each
//!   request checks again;
//! - the file sees only the environment variables `--config-paths-env` lists: a `${VAR}`
//!   of any other (default or not, in any section) is a 400 naming it, and a provider's
//!   implicit key or base URL variables are not read either, so a file cannot reach a
//!   variable by leaving `api_key` out.
//!
//! Why: a caller could make the server write a session's `final_answer.txt` holding a panel
//! whose `api_key: ${SECRET}` and `base_url` it chose, then load that file and receive the
//! secret as a bearer token. Files under the root are the operator's, their `base_url`s
//! included: a request chooses one of them, it cannot write one.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::expand::variables;
use super::{
    ConfigError, Env, PanelConfig, ProductionSettings, RecordsDb, ServerSettings, parse_panel, yaml,
};

/// Why a `massgen/path:` request gets no panel.
#[derive(Debug, Clone, PartialEq)]
pub enum PathRefused {
    /// Outside the root, where the server writes, or not a YAML file (400).
    NotAllowed(String),
    /// No such file under the root (404).
    NotFound,
    /// The file uses a variable the operator did not list (400); the message names it.
    Variable(String),
    /// The file is there but does not load (503).
    Load(ConfigError),
}

/// Folders the server writes into, with the flag that chose each.
pub fn written_dirs(production: &ProductionSettings) -> Vec<(&'static str, PathBuf)> {
    let mut dirs = Vec::new();
    if let Some(dir) = &production.records_dir {
        dirs.push(("--records-dir", dir.clone()));
    }
    if let RecordsDb::Sqlite(file) = &production.records_db {
        // The database, its journal and lock files all live beside it.
        let folder = match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        dirs.push(("--records-db", folder));
    }
    dirs
}

/// `path` with every symlink of its longest existing part resolved and the rest appended
/// (lexically: `..` in that rest cannot climb over a symlink it does not know of, so it is
/// kept out). A folder the server has not created yet still compares rightly.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(canonical) => {
                let mut out = canonical;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(e) => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(e);
                };
                rest.push(name.to_os_string());
                existing = parent;
            }
        }
    }
}

/// Start-up: the root exists, is a folder, and shares nothing with a folder the server
/// writes. Returns it resolved.
pub fn check_config_paths_root(
    root: &Path,
    production: &ProductionSettings,
) -> Result<PathBuf, String> {
    let shown = root.display();
    let canonical = root.canonicalize().map_err(|e| {
        format!("the massgen/path: root {shown} (--config-paths-root, else --configs-dir): {e}")
    })?;
    if !canonical.is_dir() {
        return Err(format!(
            "the massgen/path: root {shown} (--config-paths-root, else --configs-dir) is not a folder"
        ));
    }
    for (flag, dir) in written_dirs(production) {
        let written = resolved(&dir).map_err(|e| format!("{flag} {}: {e}", dir.display()))?;
        if written.starts_with(&canonical) || canonical.starts_with(&written) {
            return Err(format!(
                "{flag} {} overlaps the massgen/path: root {shown}: a request could load a file \
                 the server wrote; give --allow-config-paths a root of its own with \
                 --config-paths-root (or move {flag})",
                dir.display()
            ));
        }
    }
    Ok(canonical)
}

/// The panel in `requested` (relative to the root, or absolute inside it).
pub fn load_request_panel(
    requested: &str,
    settings: &ServerSettings,
    env: &Env,
) -> Result<PanelConfig, PathRefused> {
    let refused = |why: &str| PathRefused::NotAllowed(why.to_string());
    let Some(root) = &settings.config_paths_root else {
        return Err(refused(
            "this server has no folder for massgen/path: files (--config-paths-root)",
        ));
    };
    let allowed_vars = settings.config_paths_env.as_slice();
    let file = file_under(requested, root)?;
    for (flag, dir) in written_dirs(&settings.production) {
        if resolved(&dir).is_ok_and(|written| file.starts_with(written)) {
            return Err(PathRefused::NotAllowed(format!(
                "the server writes files there ({flag}); they are never loaded as configs"
            )));
        }
    }
    if !file.is_file() {
        return Err(refused("not a file"));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| {
        PathRefused::Load(ConfigError::new(requested, "", format!("cannot read: {e}")))
    })?;
    // Every string of the whole document, so a variable in a section the server ignores
    // is refused too (the check must not depend on which keys are read).
    if let Ok(root_map) = yaml::parse(&text) {
        let mut used = Vec::new();
        collect(&Value::Object(root_map), &mut used);
        if let Some(var) = used.iter().find(|v| !allowed_vars.contains(v)) {
            let listed = if allowed_vars.is_empty() {
                "none".to_string()
            } else {
                allowed_vars.join(", ")
            };
            return Err(PathRefused::Variable(format!(
                "'{requested}' uses the environment variable {var}, which a config loaded by \
                 massgen/path: may not read (the operator lists the ones it may with \
                 --config-paths-env; listed: {listed})"
            )));
        }
    }
    // The listed variables' values, read now: the loader sees nothing else.
    let values: HashMap<String, String> = allowed_vars
        .iter()
        .filter_map(|var| env(var).map(|value| (var.clone(), value)))
        .collect();
    let visible = move |name: &str| values.get(name).cloned();
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Named by the file it is, relative to the root (the root is resolved at start-up),
    // not as the request spelled it: warnings are logged once per file and key, and a
    // request's spellings (`./x.yaml`, `.//x.yaml`, …) are endless.
    let source = file
        .strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(requested));
    parse_panel(&name, &source, &text, &visible).map_err(PathRefused::Load)
}

/// `requested` as a resolved file under the resolved `root`. Lexical checks come first,
/// so a path outside the root is refused without touching the file system there.
fn file_under(requested: &str, root: &Path) -> Result<PathBuf, PathRefused> {
    let refused = |why: &str| Err(PathRefused::NotAllowed(why.to_string()));
    let requested = requested.trim();
    if requested.is_empty() {
        return refused("'massgen/path:' needs a file after the colon");
    }
    if requested.contains('\0') {
        return refused("the path holds a NUL character");
    }
    let path = Path::new(requested);
    if path.components().any(|c| c == Component::ParentDir) {
        return refused("'..' is not allowed in the path");
    }
    let as_given = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let root = root
        .canonicalize()
        .map_err(|e| PathRefused::NotAllowed(format!("the configs root cannot be read: {e}")))?;
    let relative = if path.is_absolute() {
        // The root as the operator wrote it or resolved: either spelling names it.
        match path
            .strip_prefix(&root)
            .or_else(|_| path.strip_prefix(&as_given))
        {
            Ok(rest) => rest.to_path_buf(),
            Err(_) => return refused("the file is outside the configs root"),
        }
    } else {
        path.to_path_buf()
    };
    if !has_yaml_extension(&relative) {
        return refused("only .yaml and .yml files are loaded");
    }
    let file = match root.join(&relative).canonicalize() {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(PathRefused::NotFound),
        Err(_) => return refused("the file cannot be resolved"),
    };
    if !file.starts_with(&root) {
        return refused("the file leads outside the configs root (a symbolic link)");
    }
    if !has_yaml_extension(&file) {
        return refused("only .yaml and .yml files are loaded");
    }
    Ok(file)
}

fn has_yaml_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext == "yaml" || ext == "yml")
}

/// The variables every string of `value` would read (keys are not expanded).
fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.extend(variables(s)),
        Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
        Value::Object(map) => map.values().for_each(|item| collect(item, out)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(root: &Path, vars: &[&str]) -> ServerSettings {
        ServerSettings {
            allow_config_paths: true,
            config_paths_root: Some(root.to_path_buf()),
            config_paths_env: vars.iter().map(|v| v.to_string()).collect(),
            ..ServerSettings::default()
        }
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "SECRET" => Some("s3cr3t".into()),
            "OK" => Some("fine".into()),
            _ => None,
        }
    }

    const PANEL: &str = "agents:\n  - id: a\n    backend: {type: chatcompletion, base_url: \"http://127.0.0.1:9/v1\", model: m, api_key: KEY}\n";

    #[test]
    fn only_yaml_files_under_the_root_load() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.yaml"), PANEL).unwrap();
        std::fs::write(dir.path().join("out.yaml"), PANEL).unwrap();
        std::os::unix::fs::symlink(dir.path().join("out.yaml"), root.join("link.yaml")).unwrap();
        let s = settings(&root, &[]);
        let load = |p: &str| load_request_panel(p, &s, &env);
        assert!(load("a.yaml").is_ok());
        assert!(load(&root.join("a.yaml").display().to_string()).is_ok());
        for refused in [
            "../out.yaml",
            "link.yaml",
            "a.txt",
            "",
            "/etc/passwd",
            &dir.path().join("out.yaml").display().to_string(),
        ] {
            assert!(
                matches!(load(refused), Err(PathRefused::NotAllowed(_))),
                "{refused}: {:?}",
                load(refused)
            );
        }
        assert_eq!(load("missing.yaml").err(), Some(PathRefused::NotFound));
    }

    #[test]
    fn variables_are_refused_however_the_yaml_spells_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), &["OK"]);
        for (name, key) in [
            ("plain", "\"${SECRET}\""),
            // YAML's own escapes make `${SECRET}` only once parsed.
            ("escaped", "\"\\x24{SECRET}\""),
            ("default", "\"${SECRET:-x}\""),
        ] {
            let file = format!("{name}.yaml");
            std::fs::write(dir.path().join(&file), PANEL.replace("KEY", key)).unwrap();
            match load_request_panel(&file, &s, &env) {
                Err(PathRefused::Variable(message)) => {
                    assert!(message.contains("SECRET"), "{message}");
                    assert!(!message.contains("s3cr3t"), "{message}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        std::fs::write(
            dir.path().join("ok.yaml"),
            PANEL.replace("KEY", "\"${OK}\""),
        )
        .unwrap();
        let panel = load_request_panel("ok.yaml", &s, &env).unwrap();
        let key = panel.agents[0]
            .backend
            .api_key
            .as_ref()
            .map(|k| k.expose().to_string());
        assert_eq!(key.as_deref(), Some("fine"));
    }

    #[test]
    fn the_root_stays_apart_from_where_the_server_writes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let with_records = |records: PathBuf| ProductionSettings {
            records_dir: Some(records),
            ..ProductionSettings::default()
        };
        assert!(check_config_paths_root(&root, &with_records(dir.path().join("rec"))).is_ok());
        for records in [
            root.join("rec"),
            root.join("not/yet/made"),
            dir.path().to_path_buf(),
            root.clone(),
        ] {
            let e = check_config_paths_root(&root, &with_records(records.clone())).unwrap_err();
            assert!(e.contains("--records-dir"), "{}: {e}", records.display());
        }
        let db = ProductionSettings {
            records_db: RecordsDb::Sqlite(root.join("db/records.db")),
            ..ProductionSettings::default()
        };
        let e = check_config_paths_root(&root, &db).unwrap_err();
        assert!(e.contains("--records-db"), "{e}");
        assert!(check_config_paths_root(&dir.path().join("missing"), &db).is_err());
    }
}
