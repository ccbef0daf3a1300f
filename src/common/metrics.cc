#include "common/metrics.h"

#include <fmt/format.h>

namespace fp::metrics {

namespace {

std::string Escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    out += fmt::format("{}=\"{}\"", labels[i].first, Escape(labels[i].second));
  }
  return out + "}";
}

Labels Zip(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  Labels out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    out.emplace_back(names[i], values[i]);
  }
  return out;
}

// Integers as integers; others with enough digits to round-trip.
std::string Number(double v) {
  if (v < 9e15 && v > -9e15 && v == static_cast<double>(static_cast<int64_t>(v))) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

void Header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

void Render(std::string& out, std::string_view name, std::string_view help, std::string_view type,
            const std::vector<Sample>& samples) {
  Header(out, name, help, type);
  for (const Sample& s : samples) {
    out += fmt::format("{}{} {}\n", name, LabelText(s.labels), Number(s.value));
  }
}

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

std::atomic<int64_t>& CounterFamily::Slot(const std::vector<std::string>& values) {
  MutexLock lock(mu_);
  auto& slot = slots_[values];
  if (!slot) slot = std::make_unique<std::atomic<int64_t>>(0);
  return *slot;
}

void CounterFamily::Add(const std::vector<std::string>& values, int64_t n) {
  Slot(values).fetch_add(n, std::memory_order_relaxed);
}

void CounterFamily::Render(std::string& out) const {
  std::vector<Sample> samples;
  {
    MutexLock lock(mu_);
    for (const auto& [values, slot] : slots_) {
      samples.push_back({Zip(label_names_, values), static_cast<double>(slot->load())});
    }
  }
  metrics::Render(out, name_, help_, "counter", samples);
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

HistogramFamily::Series& HistogramFamily::SeriesOf(const std::vector<std::string>& values) {
  Series& s = series_[values];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  return s;
}

void HistogramFamily::Observe(const std::vector<std::string>& values, double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  MutexLock lock(mu_);
  Series& s = SeriesOf(values);
  ++s.buckets[b];
  ++s.count;
  s.sum += v;
}

void HistogramFamily::Touch(const std::vector<std::string>& values) {
  MutexLock lock(mu_);
  SeriesOf(values);
}

void HistogramFamily::Render(std::string& out) const {
  Header(out, name_, help_, "histogram");
  MutexLock lock(mu_);
  for (const auto& [values, s] : series_) {
    Labels labels = Zip(label_names_, values);
    int64_t cumulative = 0;
    for (size_t b = 0; b <= bounds_.size(); ++b) {
      cumulative += s.buckets[b];
      Labels with_le = labels;
      with_le.emplace_back("le", b < bounds_.size() ? Number(bounds_[b]) : "+Inf");
      out += fmt::format("{}_bucket{} {}\n", name_, LabelText(with_le), cumulative);
    }
    out += fmt::format("{}_sum{} {}\n", name_, LabelText(labels), Number(s.sum));
    out += fmt::format("{}_count{} {}\n", name_, LabelText(labels), s.count);
  }
}

}  // namespace fp::metrics
