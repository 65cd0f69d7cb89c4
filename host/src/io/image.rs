//! PNG and JPEG images.

use super::{IoError, Result, extension, memory};
use ::image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use std::io::{BufRead, Cursor, Seek};
use std::path::Path;

/// Bytes of memory per pixel that decoding and clustering an image take at most: the decoded
/// pixels (up to 8 bytes), their `f32` channels (up to 16), a label and the recoloured copy.
const BYTES_PER_PIXEL: u64 = 32;

/// Decodes the PNG or JPEG at `path` (the format is detected from the content); an image whose
/// claimed size cannot fit in the available memory is refused before it is decoded.
pub fn read_image(path: &Path) -> Result<DynamicImage> {
    let meta = std::fs::metadata(path).map_err(|e| IoError::read(path, &e))?;
    if meta.is_dir() {
        return Err(IoError::input(path, "cannot read it: it is a directory"));
    }
    if meta.len() == 0 {
        return Err(IoError::input(path, "the file is empty"));
    }
    let reader = ImageReader::open(path).map_err(|e| IoError::read(path, &e))?;
    decode(reader, path, memory::available())
}

/// Decodes a PNG or JPEG held in memory; `name` is used in errors.
pub fn decode_image(bytes: &[u8], name: &Path) -> Result<DynamicImage> {
    decode_image_within(bytes, name, memory::available())
}

/// Decodes a PNG or JPEG held in memory, refusing one whose claimed width × height would need
/// more than `budget` bytes (`None`: no limit); `name` is used in errors.
pub fn decode_image_within(bytes: &[u8], name: &Path, budget: Option<u64>) -> Result<DynamicImage> {
    decode(ImageReader::new(Cursor::new(bytes)), name, budget)
}

fn decode<R: BufRead + Seek>(
    reader: ImageReader<R>,
    path: &Path,
    budget: Option<u64>,
) -> Result<DynamicImage> {
    let cannot =
        |e: ::image::ImageError| IoError::input(path, format!("cannot read the image: {e}"));
    let mut reader = reader
        .with_guessed_format()
        .map_err(|e| IoError::read(path, &e))?;
    match reader.format() {
        Some(ImageFormat::Png | ImageFormat::Jpeg) => {}
        Some(other) => {
            return Err(IoError::input(
                path,
                format!("cannot read the image: it is {other:?}, neither PNG nor JPEG"),
            ));
        }
        None => {
            return Err(IoError::input(
                path,
                "cannot read the image: it is neither PNG nor JPEG",
            ));
        }
    }
    let mut limits = Limits::no_limits();
    limits.max_alloc = budget;
    reader.limits(limits.clone());
    let mut decoder = reader.into_decoder().map_err(cannot)?;
    // The header's claim is checked before any pixel buffer is allocated.
    let (w, h) = decoder.dimensions();
    let needed = u64::from(w) * u64::from(h) * BYTES_PER_PIXEL;
    memory::check(path, &format!("its {w}×{h} pixels"), needed, budget)?;
    decoder.set_limits(limits).map_err(cannot)?;
    DynamicImage::from_decoder(decoder).map_err(cannot)
}

/// The image format for output `path` by its extension: `.png`, `.jpg` or `.jpeg`.
pub fn output_format(path: &Path) -> Result<ImageFormat> {
    match extension(path).as_str() {
        "png" => Ok(ImageFormat::Png),
        "jpg" | "jpeg" => Ok(ImageFormat::Jpeg),
        other => Err(IoError::input(
            path,
            format!("cannot write an image with extension '{other}'; use .png (or .jpg/.jpeg)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        ::image::RgbImage::from_pixel(w, h, ::image::Rgb([1, 2, 3]))
            .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
            .unwrap();
        bytes
    }

    #[test]
    fn an_image_too_large_for_memory_is_refused_by_its_header() {
        let p = Path::new("big.png");
        let e = decode_image_within(&png(64, 32), p, Some(1 << 10)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.png: its 64×32 pixels need 64.0 KiB but only 1.0 KiB of memory is available"
        );
        let img = decode_image_within(&png(64, 32), p, Some(1 << 20)).unwrap();
        assert_eq!((img.width(), img.height()), (64, 32));
    }

    #[test]
    fn other_formats_and_garbage_are_named() {
        let p = Path::new("x.gif");
        let e = decode_image(b"GIF89a....", p).unwrap_err().to_string();
        assert!(e.contains("neither PNG nor JPEG"), "{e}");
        let mut truncated = png(8, 8);
        truncated.truncate(40);
        let e = decode_image(&truncated, p).unwrap_err().to_string();
        assert!(e.starts_with("x.gif: cannot read the image"), "{e}");
    }
}
