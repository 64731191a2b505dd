//! Images in a request, door-neutral: an `https` URL or inline bytes (a `data:` URL or a
//! base64 source) become an [`Image`] after the checks every door applies, so a wire
//! format never sends an upstream something it would refuse.
//!
//! Limits (docs/images.md): at most [`MAX_IMAGES`] images in one request (the whole
//! conversation), at most [`MAX_IMAGE_BYTES`] decoded bytes per inline image, URLs of at
//! most [`MAX_URL_CHARS`] characters; only PNG, JPEG and WebP inline (what every supported
//! provider takes). Inline bytes must parse as the type they claim, with a header giving
//! dimensions above zero, at most [`MAX_IMAGE_SIDE`] pixels a side and [`MAX_IMAGE_PIXELS`]
//! in all: an upstream refuses anything else, and then the whole call, after the session
//! has started. Only the header is read (the server never decodes the pixels, which an
//! upstream does anyway). URL images are passed on unchecked: the server never fetches
//! them. The request body limit (`--max-body-bytes`) applies first, to everything together.

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
/// Pixels of an inline image's longer side (Anthropic refuses larger; the others scale
/// such images down anyway).
pub const MAX_IMAGE_SIDE: usize = 8000;
/// Pixels of an inline image, width times height (50 megapixels).
pub const MAX_IMAGE_PIXELS: usize = 50_000_000;

/// Media types accepted inline, with the format their header must parse as.
const MEDIA_TYPES: &[(&str, imagesize::ImageType)] = &[
    ("image/png", imagesize::ImageType::Png),
    ("image/jpeg", imagesize::ImageType::Jpeg),
    ("image/webp", imagesize::ImageType::Webp),
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
    let Some((_, format)) = MEDIA_TYPES.iter().find(|(t, _)| *t == media_type) else {
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
    check_header(&bytes, &media_type, *format)?;
    Ok(ImageSource::Base64 {
        media_type,
        data: data.into(),
    })
}

/// The bytes are a `format` image whose header gives sane dimensions.
fn check_header(
    bytes: &[u8],
    media_type: &str,
    format: imagesize::ImageType,
) -> Result<(), Refused> {
    let not_an_image = |why: &str| {
        Refused::new(
            "invalid_image",
            format!("the image data does not parse as {media_type}: {why}"),
        )
    };
    match imagesize::image_type(bytes) {
        Ok(found) if found == format => {}
        Ok(_) => return Err(not_an_image("its bytes are another format")),
        Err(_) => return Err(not_an_image("it has no such header")),
    }
    // imagesize reads a PNG's size at a fixed offset without looking for the IHDR chunk
    // that must hold it.
    if format == imagesize::ImageType::Png && bytes.get(12..16) != Some(b"IHDR") {
        return Err(not_an_image("no IHDR chunk after the signature"));
    }
    let size = imagesize::blob_size(bytes)
        .map_err(|_| not_an_image("its header is cut short or corrupt"))?;
    let (width, height) = (size.width, size.height);
    if width == 0 || height == 0 {
        return Err(not_an_image(&format!(
            "its header says {width} x {height} pixels"
        )));
    }
    if width.max(height) > MAX_IMAGE_SIDE || width.saturating_mul(height) > MAX_IMAGE_PIXELS {
        return Err(Refused::new(
            "image_too_large",
            format!(
                "the image is {width} x {height} pixels; at most {MAX_IMAGE_SIDE} pixels a side and {MAX_IMAGE_PIXELS} pixels in all are accepted"
            ),
        ));
    }
    Ok(())
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

    /// A PNG signature and IHDR chunk of `width` x `height`, base64.
    fn png(width: u32, height: u32) -> String {
        let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        STANDARD.encode(bytes)
    }

    #[test]
    fn headers_must_parse_with_sane_dimensions() {
        let code =
            |media_type: &str, data: &str| from_base64(media_type, data).err().map(|r| r.code);
        assert_eq!(code("image/png", PNG), None);
        assert_eq!(code("image/png", &png(8000, 6250)), None, "50 megapixels");
        for (media_type, bytes) in [
            ("image/png", &b"\x89PNG\r\n\x1a\n"[..]),
            ("image/png", b"\x89PNG\r\n\x1a\n0123456789abcdef01234567"),
            ("image/jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"),
            ("image/jpeg", b"\xff\xd8\xff"),
            ("image/webp", b"RIFF\x04\x00\x00\x00WEBP"),
            ("image/webp", b"RIFF\x04\x00\x00\x00WAVEfmt "),
        ] {
            assert_eq!(
                code(media_type, &STANDARD.encode(bytes)),
                Some("invalid_image"),
                "{media_type} {bytes:?}"
            );
        }
        assert_eq!(code("image/webp", PNG), Some("invalid_image"));
        assert_eq!(code("image/png", &png(0, 1)), Some("invalid_image"));
        assert_eq!(code("image/png", &png(1, 0)), Some("invalid_image"));
        assert_eq!(code("image/png", &png(8001, 1)), Some("image_too_large"));
        assert_eq!(code("image/png", &png(8000, 6251)), Some("image_too_large"));
        let message = from_base64("image/png", &png(u32::MAX, u32::MAX))
            .err()
            .map(|r| r.message)
            .unwrap_or_default();
        assert!(message.contains("4294967295 x 4294967295"), "{message}");
    }
}
