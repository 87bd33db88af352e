// Rendering a parsed report.json (and only that: no solver, no oracle, no clock) into report.md
// and its figures, so any report of this schema version re-renders the same way.
//
// report.md: the summary first (counts by outcome, equivalences, gradients, K* against the
// shipped K, what was skipped), then the failures with their repro and bug-bundle lines, the
// worst rows relative to τ, tables per variant x dtype, error vs T beside the sequential floor,
// K*(T), timings, equivalences, and every row. It is complete without the images: every plotted
// number is in a table.
// Figures (gnuplot, SVG + PNG under plots/): kstar-<dtype> (K*(T) per variant and class),
// error-<dtype>-<init|hard> (max |solver - oracle| vs T per variant and class, the sequential floor
// dashed, τ),
// timings-<backend>-<dtype> (median Newton and sequential ms vs T), and failure-<row id>
// (|solver - oracle| and |sequential - oracle| along t with τ, and the residual history) for
// the first kMaxFailureFigures failing rows.
// Example:
//   render_report(load_report("nightly/report.json"), "nightly/rendered", {.plots = true});
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "pararnn/reports/plot.hpp"

namespace pararnn::reports {

inline constexpr std::size_t kMaxFailureFigures = 8;

// The figures of a report, in the order report.md shows them (deterministic).
std::vector<Figure> report_figures(const nlohmann::ordered_json& report);

// A figure that was asked for and not drawn, and why (no gnuplot in PATH, gnuplot failed on it).
struct UndrawnFigure {
  std::string name, reason;
};

// report.md's text. `plots`: whether the figures are rendered beside it (the Markdown links
// plots/<name>.png and .svg); without them it says so instead. `undrawn`: the figures asked for
// that could not be drawn; report.md names them with the reason instead of linking them.
std::string render_markdown(const nlohmann::ordered_json& report, bool plots = true,
                            const std::vector<UndrawnFigure>& undrawn = {});

// The failure figure of one error profile (error_along_t) and residual history.
Figure failure_figure(const std::string& name, const std::string& title, const nlohmann::ordered_json& profile);

struct RenderOptions {
  bool plots = true;
  // Where the figures that could not be drawn are listed (may be null). A figure that cannot be
  // drawn (no gnuplot, gnuplot failed) never stops the Markdown: report.md is written and says
  // which plots are missing and why (issue 58); every number they plot is in its tables.
  std::vector<UndrawnFigure>* undrawn = nullptr;
};

// Writes <out_dir>/report.md and <out_dir>/plots/*.svg|png (each atomically); creates out_dir.
// Returns the paths written. Figures degrade (RenderOptions::undrawn); a report that is refused,
// or report.md that cannot be written, still throws.
std::vector<std::filesystem::path> render_report(const nlohmann::ordered_json& report,
                                                 const std::filesystem::path& out_dir,
                                                 const RenderOptions& options = {});

// Markdown of one AgreementReport::to_json() (verify.md and compare.md of a bug bundle).
std::string render_agreement_markdown(const nlohmann::ordered_json& agreement, const std::string& title);

// Shared number format of the reports: 3 significant digits in scientific notation, "NaN" for
// null or NaN.
std::string sci(const nlohmann::ordered_json& value);
std::string sci(double value);
// An AgreementReport's worst_index ({"b": 0, "t": 42, ...}) as "b=0 t=42 ..."; "-" when absent.
std::string worst_index_text(const nlohmann::ordered_json& worst_index);

}  // namespace pararnn::reports
