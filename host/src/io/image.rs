//! PNG and JPEG images.

use super::{IoError, Result, extension};
use ::image::{DynamicImage, ImageFormat, ImageReader};
use std::path::Path;

/// Decodes the PNG or JPEG at `path` (the format is detected from the content).
pub fn read_image(path: &Path) -> Result<DynamicImage> {
    let meta = std::fs::metadata(path).map_err(|e| IoError::read(path, &e))?;
    if meta.is_dir() {
        return Err(IoError::input(path, "cannot read it: it is a directory"));
    }
    if meta.len() == 0 {
        return Err(IoError::input(path, "the file is empty"));
    }
    let reader = ImageReader::open(path)
        .map_err(|e| IoError::read(path, &e))?
        .with_guessed_format()
        .map_err(|e| IoError::read(path, &e))?;
    if reader.format().is_none() {
        return Err(IoError::input(
            path,
            "cannot read the image: it is neither PNG nor JPEG",
        ));
    }
    reader
        .decode()
        .map_err(|e| IoError::input(path, format!("cannot read the image: {e}")))
}

/// Decodes a PNG or JPEG held in memory; `name` is used in errors.
pub fn decode_image(bytes: &[u8], name: &Path) -> Result<DynamicImage> {
    ::image::load_from_memory(bytes)
        .map_err(|e| IoError::input(name, format!("cannot read the image: {e}")))
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
