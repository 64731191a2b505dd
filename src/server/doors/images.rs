//! Images in a request, door-neutral: an `https` URL or inline bytes (a `data:` URL or a
//! base64 source) become an [`Image`] after the checks every door applies, so a wire
//! format never sends an upstream something it would refuse.
//!
//! Limits (README, "Images"): at most [`MAX_IMAGES`] images in one request (the whole
//! conversation), at most [`MAX_IMAGE_BYTES`] decoded bytes per inline image, URLs of at
//! most [`MAX_URL_CHARS`] characters; only PNG, JPEG and WebP inline (what every supported
//! provider takes), checked against the bytes themselves. The request body limit
//! (`--max-body-bytes`) applies first, to everything together.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use massgen_core::provider::{Image, ImageSource, Message};

use crate::server::error::ApiError;

/// Decoded bytes of one inline image (Anthropic's per-image limit; OpenAI's and Gemini's
/// are larger).
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
/// Images in one request, all messages together.
pub const MAX_IMAGES: usize = 20;
/// Characters of an `https` image URL.
pub const MAX_URL_CHARS: usize = 8192;

/// Media types accepted inline, with the bytes each starts with.
const MEDIA_TYPES: &[(&str, &[u8])] = &[
    ("image/png", b"\x89PNG\r\n\x1a\n"),
    ("image/jpeg", b"\xff\xd8\xff"),
    ("image/webp", b"RIFF"),
];

/// OpenAI's `detail` values.
const DETAILS: &[&str] = &["auto", "low", "high"];

/// Why an image was refused, and under which error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

impl Refused {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// As a 400 naming where the image was (`messages[2]`, `input[0]`).
    pub fn at(self, param: &'static str, place: &str) -> ApiError {
        ApiError::invalid(format!("{place}: {}", self.message), Some(param), self.code)
    }
}

/// An image given as a URL (Chat Completions `image_url.url`, Responses `image_url`):
/// `https://…` or `data:<type>;base64,…`.
pub fn from_url(url: &str, detail: Option<&str>) -> Result<Image, Refused> {
    let detail = match detail {
        None => None,
        Some(d) if DETAILS.contains(&d) => Some(d.to_string()),
        Some(d) => {
            return Err(Refused::new(
                "invalid_value",
                format!("image detail '{d}' is not one of auto, low, high"),
            ));
        }
    };
    let source = if let Some(rest) = strip_prefix_ignore_case(url, "data:") {
        let Some((header, data)) = rest.split_once(',') else {
            return Err(invalid_url("a data: URL needs a ',' before its data"));
        };
        let Some(media_type) = strip_suffix_ignore_case(header, ";base64") else {
            return Err(invalid_url(
                "a data: URL must be base64 (data:<type>;base64,<data>)",
            ));
        };
        inline(media_type, data)?
    } else {
        https(url)?
    };
    Ok(Image { source, detail })
}

/// An image given as base64 bytes with a declared media type (Anthropic's `base64`
/// source).
pub fn from_base64(media_type: &str, data: &str) -> Result<Image, Refused> {
    Ok(Image {
        source: inline(media_type, data)?,
        detail: None,
    })
}

/// An image given as a URL that must be `https` (Anthropic's `url` source).
pub fn from_https(url: &str) -> Result<Image, Refused> {
    Ok(Image {
        source: https(url)?,
        detail: None,
    })
}

/// The conversation's images, counted against [`MAX_IMAGES`].
pub fn check_count(messages: &[Message]) -> Result<(), Refused> {
    let count: usize = messages.iter().map(|m| m.images.len()).sum();
    if count > MAX_IMAGES {
        return Err(Refused::new(
            "too_many_images",
            format!("the request holds {count} images; at most {MAX_IMAGES} are accepted"),
        ));
    }
    Ok(())
}

fn invalid_url(problem: &str) -> Refused {
    Refused::new("invalid_image_url", problem)
}

fn https(url: &str) -> Result<ImageSource, Refused> {
    if url.chars().count() > MAX_URL_CHARS {
        return Err(invalid_url(&format!(
            "an image URL may have at most {MAX_URL_CHARS} characters"
        )));
    }
    let parsed = reqwest::Url::parse(url.trim())
        .map_err(|e| invalid_url(&format!("the image URL is not a valid URL ({e})")))?;
    if parsed.scheme() != "https" {
        return Err(invalid_url(&format!(
            "image URLs must be https:// or data: URLs (got a {}: URL); the upstream fetches https URLs itself, and nothing else is fetched",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid_url("the image URL has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid_url(
            "the image URL carries credentials (user:password@); use a signed URL instead",
        ));
    }
    Ok(ImageSource::Url {
        url: parsed.to_string(),
    })
}

/// Base64 bytes of an accepted type, no larger than [`MAX_IMAGE_BYTES`] once decoded, and
/// really of the type they claim (providers refuse a mismatch).
fn inline(media_type: &str, data: &str) -> Result<ImageSource, Refused> {
    let media_type = media_type.trim().to_ascii_lowercase();
    let Some((_, magic)) = MEDIA_TYPES.iter().find(|(t, _)| *t == media_type) else {
        return Err(Refused::new(
            "unsupported_image_type",
            format!(
                "image type '{media_type}' is not supported; send {}",
                MEDIA_TYPES
                    .iter()
                    .map(|(t, _)| *t)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    let too_large = || {
        Refused::new(
            "image_too_large",
            format!(
                "an inline image may hold at most {MAX_IMAGE_BYTES} bytes ({} MiB) once decoded",
                MAX_IMAGE_BYTES / (1024 * 1024)
            ),
        )
    };
    // Checked before decoding so an oversized image costs no allocation.
    if data.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
        return Err(too_large());
    }
    let bytes = STANDARD.decode(data).map_err(|e| {
        Refused::new(
            "invalid_image",
            format!("the image data is not valid base64 ({e})"),
        )
    })?;
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(too_large());
    }
    let webp_ok = media_type != "image/webp" || bytes.get(8..12) == Some(b"WEBP");
    if bytes.is_empty() || !bytes.starts_with(magic) || !webp_ok {
        return Err(Refused::new(
            "invalid_image",
            format!("the image data is not a {media_type} image"),
        ));
    }
    Ok(ImageSource::Base64 {
        media_type,
        data: data.into(),
    })
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = text.len().checked_sub(suffix.len())?;
    let tail = text.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid PNG header, base64.
    pub const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    #[test]
    fn data_and_https_urls_are_taken_and_checked() {
        let image = from_url(&format!("data:image/png;base64,{PNG}"), Some("low")).unwrap();
        assert_eq!(image.detail.as_deref(), Some("low"));
        assert_eq!(image.url(), format!("data:image/png;base64,{PNG}"));
        let image = from_url("https://example.com/cat.png?x=1", None).unwrap();
        assert_eq!(
            image.source,
            ImageSource::Url {
                url: "https://example.com/cat.png?x=1".into()
            }
        );
        let code = |url: &str| from_url(url, None).err().map(|r| r.code);
        for refused in [
            "http://example.com/cat.png",
            "file:///etc/passwd",
            "ftp://example.com/a.png",
            "https://user:pw@example.com/a.png",
            "not a url",
            "data:image/png,raw",
        ] {
            assert_eq!(code(refused), Some("invalid_image_url"), "{refused}");
        }
        assert_eq!(
            code(&format!("data:image/svg+xml;base64,{PNG}")),
            Some("unsupported_image_type")
        );
        assert_eq!(
            code(&format!("data:image/jpeg;base64,{PNG}")),
            Some("invalid_image"),
            "a PNG declared as JPEG"
        );
        assert_eq!(code("data:image/png;base64,@@@@"), Some("invalid_image"));
        assert_eq!(
            from_url("https://example.com/a.png", Some("max"))
                .err()
                .map(|r| r.code),
            Some("invalid_value")
        );
        let huge = format!(
            "data:image/png;base64,{}",
            "A".repeat(MAX_IMAGE_BYTES / 3 * 4 + 8)
        );
        assert_eq!(code(&huge), Some("image_too_large"));
    }
}
