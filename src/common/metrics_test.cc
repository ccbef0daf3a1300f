// Prometheus text format: families, escaping, histograms cumulative with +Inf, zero-initialized
// label sets.

#include "common/metrics.h"

#include <gtest/gtest.h>

namespace fp::metrics {
namespace {

TEST(MetricsTest, ACounterFamilyRendersEveryTouchedLabelSetFromZero) {
  CounterFamily c("fp_things_total", "Things.", {"kind"});
  c.Touch({"a"});
  c.Add({"b"}, 3);
  c.Add({"b"});
  std::string out;
  c.Render(out);
  EXPECT_EQ(out,
            "# HELP fp_things_total Things.\n# TYPE fp_things_total counter\n"
            "fp_things_total{kind=\"a\"} 0\nfp_things_total{kind=\"b\"} 4\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  std::string out;
  Render(out, "fp_x", "X.", "gauge", {{{{"path", "a\"b\\c\nd"}}, 1.5}});
  EXPECT_EQ(out, "# HELP fp_x X.\n# TYPE fp_x gauge\nfp_x{path=\"a\\\"b\\\\c\\nd\"} 1.5\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndEndAtInf) {
  HistogramFamily h("fp_latency_seconds", "Latency.", {"route"}, {0.1, 1});
  h.Touch({"/b"});
  h.Observe({"/a"}, 0.0625);
  h.Observe({"/a"}, 0.5);
  h.Observe({"/a"}, 5);
  h.Observe({"/a"}, 0.1);  // on a bound: in that bucket (le)
  std::string out;
  h.Render(out);
  EXPECT_EQ(out,
            "# HELP fp_latency_seconds Latency.\n# TYPE fp_latency_seconds histogram\n"
            "fp_latency_seconds_bucket{route=\"/a\",le=\"0.1\"} 2\n"
            "fp_latency_seconds_bucket{route=\"/a\",le=\"1\"} 3\n"
            "fp_latency_seconds_bucket{route=\"/a\",le=\"+Inf\"} 4\n"
            "fp_latency_seconds_sum{route=\"/a\"} 5.6625\n"
            "fp_latency_seconds_count{route=\"/a\"} 4\n"
            "fp_latency_seconds_bucket{route=\"/b\",le=\"0.1\"} 0\n"
            "fp_latency_seconds_bucket{route=\"/b\",le=\"1\"} 0\n"
            "fp_latency_seconds_bucket{route=\"/b\",le=\"+Inf\"} 0\n"
            "fp_latency_seconds_sum{route=\"/b\"} 0\n"
            "fp_latency_seconds_count{route=\"/b\"} 0\n");
}

}  // namespace
}  // namespace fp::metrics
