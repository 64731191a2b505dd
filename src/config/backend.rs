//! One agent's `backend:` section → [`BackendConfig`]: the type (a local agent program is
//! refused saying what it is), model, base URL, key, Azure's `api-version`, the HTTP spoken
//! upstream (`h2c`), and the params that go into the upstream body.
//!
//! What reaches the upstream body: every key except the server's own (`type`, `model`,
//! `api_key`, `base_url`, `pricing`, `vision`, `h2c`, the tool keys), MassGen's own options
//! (`massgen_keys::BACKEND_DROPPED`, one warning per key) and the fields each request sets
//! (`messages`, `stream`, `tools`, …). `extra_body` is merged into the body (the SDKs'
//! meaning); `betas` becomes Anthropic's `anthropic-beta` header.

use massgen_core::Secret;
use massgen_providers::presets::{self, PRESETS, Preset, Wire};
use massgen_providers::{H2C_NEEDS_HTTP, UpstreamHttp};
use serde_json::{Map, Value};

use super::expand::join;
use super::massgen_keys::{
    BACKEND_DROPPED, BACKEND_DROPPED_PREFIXES, CHATCOMPLETION_HOST_KEYS, LOCAL_AGENT_PROGRAMS,
    group_of,
};
use super::read::Cx;
use super::tools::TOOL_KEYS;
use super::{BackendConfig, ConfigError};

/// Backend keys the server itself interprets; everything else may become a param.
const SERVER_KEYS: &[&str] = &[
    "type", "model", "api_key", "base_url", "pricing", "vision", "h2c",
];

/// Request fields the server sets itself: a config value would break the protocol.
const REQUEST_OWNED_KEYS: &[&str] = &[
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "n",
];

impl Cx<'_> {
    pub(super) fn backend(
        &self,
        path: &str,
        map: &Map<String, Value>,
    ) -> Result<BackendConfig, ConfigError> {
        let preset = self.backend_type(path, map)?;
        let model_key = join(path, "model");
        let model = match self.string(map.get("model"), &model_key)? {
            Some(m) if !m.trim().is_empty() => m.trim().to_string(),
            _ => return Err(self.err(&model_key, "missing model")),
        };
        let azure = preset.wire == Wire::AzureChatCompletions;
        let base_url = self.base_url(path, map, preset, azure)?;
        let api_key = self.api_key(path, map, preset, &base_url)?;
        let api_version = if azure {
            let key = join(path, "api_version");
            let configured = self
                .string(map.get("api_version"), &key)?
                .filter(|v| !v.trim().is_empty())
                .or_else(|| {
                    (self.env)("AZURE_OPENAI_API_VERSION").filter(|v| !v.trim().is_empty())
                });
            Some(
                configured
                    .map(|v| v.trim().to_string())
                    .unwrap_or_else(|| presets::AZURE_DEFAULT_API_VERSION.to_string()),
            )
        } else {
            None
        };
        let http = self.http(path, map, &base_url)?;
        let params = self.params(path, map, preset, &base_url)?;
        let price = self.pricing(path, map.get("pricing"), &model)?;
        let vision = self
            .boolean(map.get("vision"), &join(path, "vision"))?
            .unwrap_or_else(|| super::default_vision(&model));
        Ok(BackendConfig {
            backend_type: preset.name.to_string(),
            model,
            api_key,
            base_url,
            params,
            api_version,
            price,
            vision,
            http,
        })
    }

    /// `h2c: true`: HTTP/2 with prior knowledge, for an `http://` upstream that speaks it.
    /// Refused on `https://`, where TLS already picks HTTP/2 when both sides have it.
    fn http(
        &self,
        path: &str,
        map: &Map<String, Value>,
        base_url: &str,
    ) -> Result<UpstreamHttp, ConfigError> {
        let key = join(path, "h2c");
        match self.boolean(map.get("h2c"), &key)? {
            Some(true) if !base_url.starts_with("http://") => Err(self.err(
                &key,
                format!(
                    "{H2C_NEEDS_HTTP} (base_url: https://{}/…)",
                    host_of(base_url)
                ),
            )),
            Some(true) => Ok(UpstreamHttp::H2c),
            Some(false) | None => Ok(UpstreamHttp::Negotiated),
        }
    }

    fn backend_type(
        &self,
        path: &str,
        map: &Map<String, Value>,
    ) -> Result<&'static Preset, ConfigError> {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        let type_key = join(path, "type");
        let Some(t) = self.string(map.get("type"), &type_key)? else {
            return Err(self.err(
                &type_key,
                format!("missing backend type (known: {})", names.join(", ")),
            ));
        };
        let wanted = t.trim();
        if let Some((name, what)) = LOCAL_AGENT_PROGRAMS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
        {
            return Err(self.err(
                &type_key,
                format!(
                    "'{name}' is a local agent program ({what}); MassGen runs it on its own \
                     machine, a server cannot: use an API backend type instead (known: {})",
                    names.join(", ")
                ),
            ));
        }
        presets::find(wanted).ok_or_else(|| {
            self.err(
                &type_key,
                format!("unknown backend type '{t}' (known: {})", names.join(", ")),
            )
        })
    }

    /// `base_url` (Azure: or `azure_endpoint`), else the preset's variables, else its default.
    fn base_url(
        &self,
        path: &str,
        map: &Map<String, Value>,
        preset: &Preset,
        azure: bool,
    ) -> Result<String, ConfigError> {
        let base_url_key = join(path, "base_url");
        let mut configured = self.string(map.get("base_url"), &base_url_key)?;
        if azure && configured.as_deref().is_none_or(|u| u.trim().is_empty()) {
            configured = self.string(map.get("azure_endpoint"), &join(path, "azure_endpoint"))?;
        }
        let from_env = || {
            preset.base_url_vars.iter().find_map(|(var, suffix)| {
                let url = (self.env)(var).filter(|v| !v.trim().is_empty())?;
                Some(format!("{}{suffix}", url.trim().trim_end_matches('/')))
            })
        };
        let base_url = match configured {
            Some(url) if !url.trim().is_empty() => url.trim().to_string(),
            _ => match from_env().or(preset.default_base_url.map(str::to_string)) {
                Some(url) => url.trim().to_string(),
                None => {
                    let vars: Vec<&str> = preset.base_url_vars.iter().map(|(v, _)| *v).collect();
                    let hint = if vars.is_empty() {
                        String::new()
                    } else {
                        format!(" (or set {})", vars.join(" or "))
                    };
                    return Err(self.err(
                        &base_url_key,
                        format!(
                            "base_url is required for backend type '{}'{hint}",
                            preset.name
                        ),
                    ));
                }
            },
        };
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(self.err(&base_url_key, "must start with http:// or https://"));
        }
        Ok(base_url.trim_end_matches('/').to_string())
    }

    /// `backend.api_key` (after expansion; empty counts as absent), else the preset's key
    /// variables in order; for `chatcompletion`, the variables of the preset its `base_url`
    /// host belongs to (MassGen's rule), and no key for any other host.
    fn api_key(
        &self,
        path: &str,
        map: &Map<String, Value>,
        preset: &Preset,
        base_url: &str,
    ) -> Result<Option<Secret>, ConfigError> {
        let from_config = self
            .string(map.get("api_key"), &join(path, "api_key"))?
            .filter(|k| !k.trim().is_empty());
        if let Some(key) = from_config {
            return Ok(Some(Secret::new(key.trim())));
        }
        let host = host_of(base_url);
        let (key_vars, required, source): (&[&str], bool, String) =
            if preset.name == "chatcompletion" {
                let owner = CHATCOMPLETION_HOST_KEYS
                    .iter()
                    .find(|(suffix, _)| host_matches(host, suffix))
                    .and_then(|(_, preset)| presets::find(preset));
                match owner {
                    Some(owner) => (owner.key_vars, true, format!("{host} (base_url)")),
                    None => {
                        if !is_loopback(host) {
                            self.warn(
                                &join(path, "api_key"),
                                format!(
                                    "no API key is sent to {host}: set backend.api_key if it needs \
                                 one (no provider's key variable is sent to an unknown host)"
                                ),
                            );
                        }
                        return Ok(None);
                    }
                }
            } else {
                (preset.key_vars, preset.key_required, String::new())
            };
        let key = key_vars
            .iter()
            .find_map(|var| (self.env)(var).filter(|v| !v.trim().is_empty()));
        match key {
            Some(key) => Ok(Some(Secret::new(key.trim()))),
            None if required => {
                let vars = key_vars.join(" or ");
                let whose = if source.is_empty() {
                    String::new()
                } else {
                    format!(" for {source}")
                };
                Err(self.err(
                    path,
                    format!(
                        "no API key{whose}: set {vars} (environment or .env) or backend.api_key"
                    ),
                ))
            }
            None => Ok(None),
        }
    }

    /// The keys that go into the upstream body, expanded.
    fn params(
        &self,
        path: &str,
        map: &Map<String, Value>,
        preset: &Preset,
        base_url: &str,
    ) -> Result<Map<String, Value>, ConfigError> {
        let azure = preset.wire == Wire::AzureChatCompletions;
        let mut params = Map::new();
        let mut extra_body = None;
        for (key, value) in map {
            let key_path = join(path, key);
            let k = key.as_str();
            if SERVER_KEYS.contains(&k)
                || TOOL_KEYS.contains(&k)
                || (azure && (k == "api_version" || k == "azure_endpoint"))
            {
                continue;
            }
            if let Some(group) = group_of(BACKEND_DROPPED, k) {
                self.warn(
                    &key_path,
                    format!("MassGen option ({}), not sent upstream", group.why),
                );
            } else if let Some((_, why)) = BACKEND_DROPPED_PREFIXES
                .iter()
                .find(|(prefix, _)| k.starts_with(prefix))
            {
                self.warn(
                    &key_path,
                    format!("MassGen option ({why}), not sent upstream"),
                );
            } else if REQUEST_OWNED_KEYS.contains(&k) {
                self.warn(&key_path, "set by massgen itself for every request");
            } else if k == "betas" && preset.wire != Wire::Anthropic {
                self.warn(
                    &key_path,
                    "Anthropic's beta header, only sent by claude backends",
                );
            } else if k == "reasoning"
                && preset.wire == Wire::ChatCompletions
                && preset.name != "openrouter"
                && !host_matches(host_of(base_url), "openrouter.ai")
            {
                // As MassGen: on Chat Completions only OpenRouter takes a `reasoning` object.
                self.warn(
                    &key_path,
                    "sent on Chat Completions to OpenRouter only (use reasoning_effort elsewhere)",
                );
            } else if k == "extra_body" {
                extra_body = Some(self.extra_body(&key_path, value)?);
            } else {
                params.insert(key.clone(), self.expanded(value, &key_path)?);
            }
        }
        // Last, so its keys win, as the SDKs merge it over the request.
        params.extend(extra_body.unwrap_or_default());
        Ok(params)
    }

    fn extra_body(&self, key_path: &str, value: &Value) -> Result<Map<String, Value>, ConfigError> {
        match self.expanded(value, key_path)? {
            Value::Null => Ok(Map::new()),
            Value::Object(mut fields) => {
                fields.retain(|k, _| {
                    let owned = REQUEST_OWNED_KEYS.contains(&k.as_str());
                    if owned {
                        self.warn(
                            &join(key_path, k),
                            "set by massgen itself for every request",
                        );
                    }
                    !owned
                });
                Ok(fields)
            }
            _ => Err(self.err(key_path, "must be a mapping of body fields")),
        }
    }
}

/// The host of an `http(s)://` URL (no user info, no port), lower-cased as written.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(bracketed) = host.strip_prefix('[') {
        return bracketed.split(']').next().unwrap_or("");
    }
    host.split(':').next().unwrap_or("")
}

/// `host` is `domain` or one of its subdomains.
fn host_matches(host: &str, domain: &str) -> bool {
    let (h, d) = (host.trim_end_matches('.').as_bytes(), domain.as_bytes());
    h.eq_ignore_ascii_case(d)
        || (h.len() > d.len()
            && h[h.len() - d.len()..].eq_ignore_ascii_case(d)
            && h[h.len() - d.len() - 1] == b'.')
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
        || host.ends_with(".localhost")
}
