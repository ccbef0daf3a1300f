#pragma once

// Prometheus text format (0.0.4) for /metrics: families of counters and histograms kept as
// they change, and gauges or counters rendered from values read at scrape time. Names follow
// Prometheus's conventions (base units, `_total` for counters); label values are escaped.
// Every label set a family is told about (Touch) is exported from the start, at zero.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace fp::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// One sample of a family rendered at scrape time.
struct Sample {
  Labels labels;
  double value = 0;
};

// Appends a family: its HELP and TYPE lines ("counter" or "gauge"), then one line per sample.
void Render(std::string& out, std::string_view name, std::string_view help, std::string_view type,
            const std::vector<Sample>& samples);

// A counter family with fixed label names. Thread-safe; Add on a known label set takes no lock
// but a shared one.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  // `values` in the order of the label names.
  void Add(const std::vector<std::string>& values, int64_t n = 1);
  void Touch(const std::vector<std::string>& values) { Add(values, 0); }
  void Render(std::string& out) const;

 private:
  std::atomic<int64_t>& Slot(const std::vector<std::string>& values);
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<std::atomic<int64_t>>> slots_
      FP_GUARDED_BY(mu_);
};

// A histogram family with fixed label names and bucket bounds (seconds, or whatever the unit).
class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  void Observe(const std::vector<std::string>& values, double v);
  void Touch(const std::vector<std::string>& values);
  void Render(std::string& out) const;

 private:
  struct Series {
    std::vector<int64_t> buckets;  // per bound, not cumulative; the last one is +Inf
    int64_t count = 0;
    double sum = 0;
  };
  Series& SeriesOf(const std::vector<std::string>& values) FP_REQUIRES(mu_);
  const std::string name_, help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, Series> series_ FP_GUARDED_BY(mu_);
};

}  // namespace fp::metrics
