#include "torus/head/prometheus.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace torus::head {
namespace {

// A strict reading of the text format: every line is a HELP, a TYPE, or a sample of the family last declared.
void ExpectValidExposition(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (gauge|counter))");
  static const std::regex kSample(
      R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (-?[0-9.e+-]+|NaN|[+-]Inf))re");
  std::istringstream in(text);
  std::string line, family;
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kHelp)) {
      family = m[1];
    } else if (std::regex_match(line, m, kType)) {
      EXPECT_EQ(m[1], family) << line;
    } else if (std::regex_match(line, m, kSample)) {
      EXPECT_EQ(m[1], family) << line;
    } else {
      ADD_FAILURE() << "not a valid exposition line: " << line;
    }
  }
}

TEST(PrometheusTest, WritesFamiliesAndSamples) {
  PrometheusWriter w;
  w.Family("torus_nodes", "gauge", "Nodes by state.");
  w.Sample("torus_nodes", {{"state", "ALIVE"}}, 16);
  w.Sample("torus_nodes", {{"state", "DEAD"}}, 0);
  w.Family("torus_resource_total", "gauge", "Resources of alive nodes.");
  w.Sample("torus_resource_total", {{"resource", "CPU"}}, 1.5);
  w.Family("torus_up", "gauge", "Always 1.");
  w.Sample("torus_up", {}, 1);
  EXPECT_EQ(w.Text(),
            "# HELP torus_nodes Nodes by state.\n# TYPE torus_nodes gauge\n"
            "torus_nodes{state=\"ALIVE\"} 16\ntorus_nodes{state=\"DEAD\"} 0\n"
            "# HELP torus_resource_total Resources of alive nodes.\n# TYPE torus_resource_total gauge\n"
            "torus_resource_total{resource=\"CPU\"} 1.5\n"
            "# HELP torus_up Always 1.\n# TYPE torus_up gauge\ntorus_up 1\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, EscapesLabelValuesAndHelp) {
  PrometheusWriter w;
  w.Family("torus_x", "counter", "a \\ b\nc");
  w.Sample("torus_x", {{"reason", "say \"hi\"\\now\n"}}, 2);
  EXPECT_EQ(w.Text(), "# HELP torus_x a \\\\ b\\nc\n# TYPE torus_x counter\ntorus_x{reason=\"say \\\"hi\\\"\\\\now\\n\"} 2\n");
  ExpectValidExposition(w.Text());
}

TEST(PrometheusTest, SpecialValues) {
  PrometheusWriter w;
  w.Family("torus_v", "gauge", "v");
  w.Sample("torus_v", {}, 1e20);
  w.Sample("torus_v", {}, 0.25);
  EXPECT_EQ(w.Text(), "# HELP torus_v v\n# TYPE torus_v gauge\ntorus_v 1e+20\ntorus_v 0.25\n");
  ExpectValidExposition(w.Text());
}

}  // namespace
}  // namespace torus::head
