//! `--metric` and `--p`, shared by the neighbour commands.

use crate::DistanceMetric;
use crate::error::{Error, Result};

/// The distance of a neighbour command.
#[derive(clap::Args, Debug, Clone)]
pub struct MetricArgs {
    /// Distance: l2, sqeuclidean, l1, ip, cosine, chebyshev, or minkowski (with --p; also
    /// written minkowski:P).
    #[arg(long = "metric", value_name = "METRIC", default_value = "l2")]
    name: String,
    /// Exponent of --metric minkowski: a finite P ≥ 1 (default 2; 1 is l1, 2 is l2).
    #[arg(long = "p", value_name = "P", allow_negative_numbers = true)]
    p: Option<f64>,
}

impl MetricArgs {
    /// The metric named, with `--p` where it is Minkowski.
    pub fn get(&self) -> Result<DistanceMetric> {
        let minkowski = self.name.trim().eq_ignore_ascii_case("minkowski");
        match self.p {
            Some(p) if minkowski => DistanceMetric::minkowski(p),
            Some(_) => Err(Error::invalid(
                "p",
                format!(
                    "--p applies to --metric minkowski only, not to --metric {}",
                    self.name
                ),
            )),
            None => self.name.parse(),
        }
    }

    /// The metric's name in summaries (the words given where they name no metric, which the
    /// command has refused before it reports).
    pub fn label(&self) -> String {
        match self.get() {
            Ok(m) => super::knn::metric_name(m),
            Err(_) => self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(name: &str, p: Option<f64>) -> Result<DistanceMetric> {
        let name = name.to_string();
        MetricArgs { name, p }.get()
    }

    #[test]
    fn p_goes_with_minkowski_only() {
        let p3 = DistanceMetric::minkowski(3.0).unwrap();
        assert_eq!(get("minkowski", Some(3.0)).unwrap(), p3);
        assert_eq!(get("minkowski:3", None).unwrap(), p3);
        assert_eq!(get("minkowski", None).unwrap(), DistanceMetric::Euclidean);
        assert_eq!(get("minkowski", Some(1.0)).unwrap(), DistanceMetric::L1);
        assert_eq!(get("chebyshev", None).unwrap(), DistanceMetric::Chebyshev);
        for (name, p) in [
            ("minkowski", Some(0.5)),
            ("minkowski", Some(f64::NAN)),
            ("minkowski", Some(f64::INFINITY)),
            ("l1", Some(3.0)),
        ] {
            let err = get(name, p).unwrap_err();
            assert!(
                matches!(err, Error::InvalidParameter { name: "p", .. }),
                "{name} {p:?}: {err}"
            );
        }
    }
}
