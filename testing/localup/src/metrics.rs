//! cloudcore's Prometheus metrics, scraped from the monitor server.

use std::time::Duration;

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name as exposed (counters end in `_total`).
    pub name: String,
    /// Its labels in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if it has one.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    /// In exposition order.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the text exposition format (comments skipped; label values without escaped
    /// quotes, as cloudcore writes them).
    ///
    /// # Errors
    /// [`Error::Parse`] naming the line.
    pub fn parse(text: &str) -> Result<Metrics> {
        let bad = |line: &str| Error::Parse {
            what: "metrics".into(),
            message: format!("unreadable line: {line}"),
        };
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line.rsplit_once(' ').ok_or_else(|| bad(line))?;
            let value: f64 = value.parse().map_err(|_| bad(line))?;
            let (name, labels) = match series.split_once('{') {
                None => (series, Vec::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').ok_or_else(|| bad(line))?;
                    let labels = body
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            let (k, v) = p.split_once("=\"").ok_or_else(|| bad(line))?;
                            Ok((k.to_owned(), v.trim_end_matches('"').to_owned()))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    (name, labels)
                }
            };
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        Ok(Metrics { samples })
    }

    /// The samples of metric `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The sum over every sample of `name` (0 when it has none).
    pub fn sum(&self, name: &str) -> f64 {
        self.named(name).map(|s| s.value).sum()
    }
}

impl Cluster {
    /// One scrape of cloudcore's `/metrics`.
    ///
    /// # Errors
    /// When cloudcore does not answer 200 within 10 s, or the text does not parse.
    pub async fn metrics(&self) -> Result<Metrics> {
        let what = format!("GET http://{}/metrics", self.monitor);
        let response =
            edgecore_interop::http_get(self.monitor, "/metrics", Duration::from_secs(10))
                .await
                .map_err(|e| Error::io(&what, std::io::Error::other(e.to_string())))?;
        if response.status != 200 {
            return Err(Error::Parse {
                what,
                message: format!("status {}", response.status),
            });
        }
        Metrics::parse(&response.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_with_and_without_labels_parse() {
        let text = "# HELP x X.\n# TYPE x counter\nx_total 3\n\
                    cloudcore_node_authorization_denied_total{module=\"edgecontroller\",kind=\"patchPod\"} 2\n\
                    empty{} 1\n";
        let m = Metrics::parse(text).unwrap();
        assert_eq!(m.sum("x_total"), 3.0);
        let denied: Vec<_> = m
            .named("cloudcore_node_authorization_denied_total")
            .collect();
        assert_eq!(denied.len(), 1);
        assert_eq!(denied[0].label("kind"), Some("patchPod"));
        assert_eq!(denied[0].label("module"), Some("edgecontroller"));
        assert_eq!(m.sum("empty"), 1.0);
        assert_eq!(m.sum("absent"), 0.0);
    }

    #[test]
    fn a_line_without_a_value_is_an_error() {
        assert!(Metrics::parse("broken\n").is_err());
    }
}
