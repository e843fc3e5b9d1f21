// Prometheus text exposition (format 0.0.4): families of gauges and counters with labelled samples.
//
// Example:
//   PrometheusWriter w;
//   w.Family("torus_nodes", "gauge", "Nodes by state.");
//   w.Sample("torus_nodes", {{"state", "ALIVE"}}, 16);
//   std::string text = w.Text();
//     # HELP torus_nodes Nodes by state.
//     # TYPE torus_nodes gauge
//     torus_nodes{state="ALIVE"} 16
//
// Thread-safety: not thread-safe; build one per scrape.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace torus::head {

class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family; its samples must follow before the next family. `type` is "gauge" or "counter".
  void Family(const std::string& name, const std::string& type, const std::string& help);
  void Sample(const std::string& name, const Labels& labels, double value);
  const std::string& Text() const { return text_; }

 private:
  std::string text_;
};

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(const std::string& value);
// Escapes HELP text: backslash and newline.
std::string EscapeHelp(const std::string& text);

}  // namespace torus::head
