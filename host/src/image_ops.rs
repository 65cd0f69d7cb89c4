//! Images as k-means data: pixels for colour segmentation, `p × p × c` patches, and the
//! pictures made from the results (recoloured image, palette strip, centroid patch grid).
//!
//! ```
//! use kmeans_knn::image_ops::{Pixels, recolor};
//! use kmeans_knn::{Device, KMeans, MatrixView};
//! let img = image::RgbImage::from_fn(8, 4, |x, _| if x < 4 { [250, 0, 0].into() } else { [0, 0, 240].into() });
//! let px = Pixels::from_image(&img.into());
//! let model = KMeans::params(2).device(Device::Cpu).fit(&px.matrix())?;
//! let out = recolor(&model.labels, &model.centroids, px.channels, px.width, px.height)?;
//! assert_eq!(out.dimensions(), (8, 4));
//! # Ok::<(), kmeans_knn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use image::{DynamicImage, Rgb, RgbImage};

/// An image as `f32` samples in `0..=255`, row-major, interleaved channels (1 for grey, 3 for
/// colour; alpha is dropped).
#[derive(Clone, Debug, PartialEq)]
pub struct Pixels {
    /// `height × width × channels` values.
    pub data: Vec<f32>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Channels per pixel: 1 or 3.
    pub channels: usize,
}

impl Pixels {
    /// The image's samples; greyscale images keep one channel, all others become RGB.
    pub fn from_image(img: &DynamicImage) -> Pixels {
        let (width, height) = (img.width(), img.height());
        if img.color().has_color() {
            let rgb = img.to_rgb8();
            Pixels {
                data: rgb.as_raw().iter().map(|&v| f32::from(v)).collect(),
                width,
                height,
                channels: 3,
            }
        } else {
            let l = img.to_luma8();
            Pixels {
                data: l.as_raw().iter().map(|&v| f32::from(v)).collect(),
                width,
                height,
                channels: 1,
            }
        }
    }

    /// Number of pixels.
    pub fn len(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Whether the image has no pixels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One row per pixel, one column per channel.
    pub fn matrix(&self) -> MatrixView<'_> {
        MatrixView::new(&self.data, self.len(), self.channels).expect("pixels × channels")
    }

    /// The `p × p` patches whose top-left corners lie on a `stride` grid, each flattened
    /// row-major as `p × p × channels` values: a `n × (p·p·c)` matrix with
    /// `n = ((w − p)/s + 1) · ((h − p)/s + 1)`, patches in row-major order of their corners.
    pub fn patches(&self, p: usize, stride: usize) -> Result<Patches> {
        if p == 0 {
            return Err(Error::invalid("patch", "the patch size must be at least 1"));
        }
        if stride == 0 {
            return Err(Error::invalid("stride", "the stride must be at least 1"));
        }
        let (w, h, c) = (self.width as usize, self.height as usize, self.channels);
        if p > w || p > h {
            return Err(Error::invalid(
                "patch",
                format!("a {p}×{p} patch does not fit in a {w}×{h} image"),
            ));
        }
        let (nx, ny) = ((w - p) / stride + 1, (h - p) / stride + 1);
        let d = p * p * c;
        let bytes = (nx * ny) as u64 * d as u64 * 4;
        if let Some(free) = crate::io::memory::available().filter(|&free| bytes > free) {
            return Err(Error::invalid(
                "patch",
                format!(
                    "{} patches of {p}×{p} pixels need {} but only {} of memory is available; \
                     use a larger stride",
                    nx * ny,
                    crate::io::memory::bytes(bytes),
                    crate::io::memory::bytes(free)
                ),
            ));
        }
        let mut data = Vec::with_capacity(nx * ny * d);
        for py in 0..ny {
            for px in 0..nx {
                let (x0, y0) = (px * stride, py * stride);
                for y in y0..y0 + p {
                    let start = (y * w + x0) * c;
                    data.extend_from_slice(&self.data[start..start + p * c]);
                }
            }
        }
        Ok(Patches {
            data,
            rows: nx * ny,
            cols: d,
            across: nx,
            down: ny,
        })
    }
}

/// Patches cut from an image by [`Pixels::patches`].
#[derive(Clone, Debug, PartialEq)]
pub struct Patches {
    /// `rows × cols` values.
    pub data: Vec<f32>,
    /// Number of patches.
    pub rows: usize,
    /// `p · p · channels`.
    pub cols: usize,
    /// Patches per row of the image.
    pub across: usize,
    /// Patches per column of the image.
    pub down: usize,
}

impl Patches {
    /// The patches as a matrix.
    pub fn matrix(&self) -> MatrixView<'_> {
        MatrixView::new(&self.data, self.rows, self.cols).expect("rows × cols")
    }
}

fn to_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

fn colour(centroid: &[f32]) -> Rgb<u8> {
    match centroid {
        [g] => Rgb([to_u8(*g); 3]),
        [r, g, b, ..] => Rgb([to_u8(*r), to_u8(*g), to_u8(*b)]),
        _ => Rgb([0; 3]),
    }
}

fn check_channels(channels: usize) -> Result<()> {
    if channels == 1 || channels == 3 {
        Ok(())
    } else {
        Err(Error::invalid(
            "channels",
            format!("images have 1 or 3 channels, not {channels}"),
        ))
    }
}

/// The image where every pixel takes its cluster's colour (centroids `k × channels`, rounded).
pub fn recolor(
    labels: &[u32],
    centroids: &[f32],
    channels: usize,
    width: u32,
    height: u32,
) -> Result<RgbImage> {
    check_channels(channels)?;
    if labels.len() != width as usize * height as usize {
        return Err(Error::invalid(
            "labels",
            format!("{} labels for a {width}×{height} image", labels.len()),
        ));
    }
    let k = centroids.len() / channels;
    let palette: Vec<Rgb<u8>> = centroids.chunks(channels).map(colour).collect();
    if let Some(&bad) = labels.iter().find(|&&l| l as usize >= k) {
        return Err(Error::invalid(
            "labels",
            format!("label {bad} is not below k = {k}"),
        ));
    }
    Ok(RgbImage::from_fn(width, height, |x, y| {
        palette[labels[(y * width + x) as usize] as usize]
    }))
}

/// Cluster indices ordered by size, largest first (ties: lower index first).
pub fn order_by_size(sizes: &[u32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(a.cmp(&b)));
    order
}

/// The largest image drawn (2^28 pixels, 768 MiB of RGB): beyond it a palette or a patch grid
/// is a mistake in the options, not a picture.
const MAX_OUTPUT_PIXELS: u64 = 1 << 28;

/// A strip of `swatch × swatch` squares, one per non-empty cluster, largest cluster first:
/// `swatch · clusters` wide and `swatch` high.
pub fn palette_strip(
    centroids: &[f32],
    channels: usize,
    sizes: &[u32],
    swatch: u32,
) -> Result<RgbImage> {
    check_channels(channels)?;
    let swatch = swatch.max(1);
    let order: Vec<usize> = order_by_size(sizes)
        .into_iter()
        .filter(|&c| sizes[c] > 0)
        .collect();
    let n = order.len().max(1) as u32;
    let width = swatch
        .checked_mul(n)
        .filter(|&w| u64::from(w) * u64::from(swatch) <= MAX_OUTPUT_PIXELS)
        .ok_or_else(|| {
            Error::invalid(
                "swatch",
                format!(
                    "{n} swatches of {swatch} pixels make too large an image; use a smaller swatch"
                ),
            )
        })?;
    Ok(RgbImage::from_fn(width, swatch, |x, _| {
        order.get((x / swatch) as usize).map_or(Rgb([0; 3]), |&c| {
            colour(&centroids[c * channels..(c + 1) * channels])
        })
    }))
}

/// Layout of a centroid patch grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridLayout {
    /// Patches across.
    pub columns: u32,
    /// Patches down.
    pub rows: u32,
    /// Pixels per patch pixel.
    pub zoom: u32,
    /// Pixels between patches (and around the grid).
    pub gap: u32,
}

impl GridLayout {
    /// A near-square layout for `k` patches of side `p`: `ceil(sqrt(k))` columns, zoom so a patch
    /// is at least 40 pixels, 2-pixel gaps.
    pub fn for_patches(k: usize, p: usize) -> GridLayout {
        let columns = (k as f64).sqrt().ceil().max(1.0) as u32;
        let rows = (k as u32).div_ceil(columns).max(1);
        let zoom = 40u32.div_ceil(p.max(1) as u32).max(1);
        GridLayout {
            columns,
            rows,
            zoom,
            gap: 2,
        }
    }

    /// The size of the grid image for patches of side `p` (saturating at `u32::MAX`).
    pub fn size(&self, p: usize) -> (u32, u32) {
        let cell = u32::try_from(p)
            .unwrap_or(u32::MAX)
            .saturating_mul(self.zoom);
        let side = |n: u32| {
            n.saturating_mul(cell.saturating_add(self.gap))
                .saturating_add(self.gap)
        };
        (side(self.columns), side(self.rows))
    }
}

/// The centroid patches (`k × (p·p·channels)`) drawn as one grid image, in the order `order`
/// (usually [`order_by_size`]), row by row, on a white background.
pub fn patch_grid(
    centroids: &[f32],
    p: usize,
    channels: usize,
    order: &[usize],
    layout: GridLayout,
) -> Result<RgbImage> {
    check_channels(channels)?;
    let d = p * p * channels;
    if d == 0 || !centroids.len().is_multiple_of(d) {
        return Err(Error::invalid(
            "centroids",
            format!(
                "{} values do not make {p}×{p}×{channels} patches",
                centroids.len()
            ),
        ));
    }
    let k = centroids.len() / d;
    if order.iter().any(|&c| c >= k) || order.len() > (layout.columns * layout.rows) as usize {
        return Err(Error::invalid(
            "order",
            "the patch order does not fit the grid",
        ));
    }
    let (w, h) = layout.size(p);
    if u64::from(w) * u64::from(h) > MAX_OUTPUT_PIXELS {
        return Err(Error::invalid(
            "zoom",
            format!("the grid of {k} patches would be {w}×{h} pixels; use a smaller zoom"),
        ));
    }
    let mut img = RgbImage::from_pixel(w, h, Rgb([255; 3]));
    let cell = p as u32 * layout.zoom;
    for (slot, &c) in order.iter().enumerate() {
        let gx = layout.gap + (slot as u32 % layout.columns) * (cell + layout.gap);
        let gy = layout.gap + (slot as u32 / layout.columns) * (cell + layout.gap);
        let patch = &centroids[c * d..(c + 1) * d];
        for y in 0..cell {
            for x in 0..cell {
                let (py, px) = ((y / layout.zoom) as usize, (x / layout.zoom) as usize);
                let at = (py * p + px) * channels;
                img.put_pixel(gx + x, gy + y, colour(&patch[at..at + channels]));
            }
        }
    }
    Ok(img)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grey_ramp(w: u32, h: u32) -> Pixels {
        Pixels::from_image(&DynamicImage::ImageLuma8(image::GrayImage::from_fn(
            w,
            h,
            |x, y| image::Luma([(y * w + x) as u8]),
        )))
    }

    #[test]
    fn pixels_keep_channels() {
        let rgb = RgbImage::from_pixel(3, 2, Rgb([1, 2, 3]));
        let px = Pixels::from_image(&rgb.into());
        assert_eq!((px.channels, px.len()), (3, 6));
        assert_eq!(&px.data[..3], &[1.0, 2.0, 3.0]);
        assert_eq!(grey_ramp(4, 4).channels, 1);
    }

    #[test]
    fn patches_are_cut_row_major() {
        let px = grey_ramp(4, 3);
        let p = px.patches(2, 1).unwrap();
        assert_eq!((p.rows, p.cols, p.across, p.down), (6, 4, 3, 2));
        assert_eq!(&p.data[..4], &[0.0, 1.0, 4.0, 5.0]);
        assert_eq!(&p.data[5 * 4..], &[6.0, 7.0, 10.0, 11.0]);
        let p = px.patches(2, 2).unwrap();
        assert_eq!((p.rows, p.across, p.down), (2, 2, 1));
        assert_eq!(&p.data[4..], &[2.0, 3.0, 6.0, 7.0]);
        assert!(px.patches(5, 1).is_err());
        assert!(px.patches(2, 0).is_err());
        let rgb = Pixels::from_image(&RgbImage::from_pixel(7, 6, Rgb([9, 8, 7])).into());
        let p = rgb.patches(5, 1).unwrap();
        assert_eq!((p.rows, p.cols), (6, 75));
    }

    #[test]
    fn recolor_uses_centroid_colours() {
        let img = recolor(
            &[0, 1, 1, 0],
            &[10.4, 20.0, 30.0, 200.0, 100.0, 0.0],
            3,
            2,
            2,
        )
        .unwrap();
        assert_eq!(img.get_pixel(0, 0), &Rgb([10, 20, 30]));
        assert_eq!(img.get_pixel(1, 0), &Rgb([200, 100, 0]));
        assert!(recolor(&[0, 2, 1, 0], &[0.0; 6], 3, 2, 2).is_err());
        assert!(recolor(&[0, 1], &[0.0; 6], 3, 2, 2).is_err());
        let grey = recolor(&[0, 0], &[7.0], 1, 2, 1).unwrap();
        assert_eq!(grey.get_pixel(1, 0), &Rgb([7, 7, 7]));
    }

    #[test]
    fn palette_is_ordered_by_size_and_skips_empty() {
        let strip = palette_strip(
            &[0.0, 0.0, 0.0, 255.0, 255.0, 255.0, 9.0, 9.0, 9.0],
            3,
            &[1, 5, 0],
            4,
        )
        .unwrap();
        assert_eq!(strip.dimensions(), (8, 4));
        assert_eq!(strip.get_pixel(0, 0), &Rgb([255; 3]));
        assert_eq!(strip.get_pixel(4, 3), &Rgb([0; 3]));
        assert_eq!(order_by_size(&[3, 7, 3, 9]), vec![3, 1, 0, 2]);
    }

    #[test]
    fn grid_has_the_announced_size() {
        let layout = GridLayout::for_patches(5, 2);
        assert_eq!((layout.columns, layout.rows, layout.zoom), (3, 2, 20));
        let layout = GridLayout { zoom: 12, ..layout };
        let centroids: Vec<f32> = (0..5).flat_map(|c| [c as f32 * 50.0; 4]).collect();
        let img = patch_grid(&centroids, 2, 1, &[4, 3, 2, 1, 0], layout).unwrap();
        assert_eq!(img.dimensions(), layout.size(2));
        assert_eq!(img.dimensions(), (3 * 26 + 2, 2 * 26 + 2));
        assert_eq!(img.get_pixel(2, 2), &Rgb([200; 3]));
        assert_eq!(img.get_pixel(0, 0), &Rgb([255; 3]));
        assert_eq!(img.get_pixel(2 + 26, 2), &Rgb([150; 3]));
    }

    #[test]
    fn palettes_and_grids_too_large_to_draw_are_refused() {
        let sizes = vec![1u32; 300_000];
        let centroids = vec![0f32; 3 * sizes.len()];
        let e = palette_strip(&centroids, 3, &sizes, 1024).unwrap_err();
        assert!(e.to_string().contains("use a smaller swatch"), "{e}");
        assert!(palette_strip(&centroids[..3], 3, &sizes[..1], 1024).is_ok());
        let layout = GridLayout {
            columns: 100,
            rows: 100,
            zoom: 64,
            gap: 2,
        };
        let e = patch_grid(&vec![0f32; 1000 * 1000], 1000, 1, &[0], layout).unwrap_err();
        assert!(e.to_string().contains("use a smaller zoom"), "{e}");
    }
}
