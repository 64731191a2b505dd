//! An agent's `backend.pricing` → [`Price`] (USD per million tokens; never sent upstream),
//! else the built-in list price of its model (`massgen_providers::pricing`), else unknown:
//! an unknown price makes the agent's cost unknown, never zero.

use massgen_core::provider::Price;
use serde_json::Value;

use super::ConfigError;
use super::expand::join;
use super::read::Cx;

/// Keys of `backend.pricing`.
const PRICING_KEYS: &[&str] = &[
    "input_per_million",
    "output_per_million",
    "cached_input_per_million",
];

impl Cx<'_> {
    pub(super) fn pricing(
        &self,
        path: &str,
        value: Option<&Value>,
        model: &str,
    ) -> Result<Option<Price>, ConfigError> {
        let key = join(path, "pricing");
        let Some(map) = self.section(value, &key)? else {
            return Ok(massgen_providers::pricing::list_price(model));
        };
        self.only_known(map, &key, PRICING_KEYS)?;
        let rate = |name: &str, required: bool| -> Result<Option<f64>, ConfigError> {
            let at = join(&key, name);
            match self.number(map.get(name), &at)? {
                Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
                Some(n) => Err(self.err(&at, format!("must be 0 or more USD, got {n}"))),
                None if required => Err(self.err(&at, "missing (USD per million tokens)")),
                None => Ok(None),
            }
        };
        let input = rate("input_per_million", true)?.unwrap_or_default();
        let output = rate("output_per_million", true)?.unwrap_or_default();
        // No cached rate given: cached input costs what input costs (no discount assumed).
        let cached = rate("cached_input_per_million", false)?.unwrap_or(input);
        Ok(Some(Price {
            input_per_million: input,
            output_per_million: output,
            cached_input_per_million: cached,
        }))
    }
}
