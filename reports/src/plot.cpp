#include "pararnn/reports/plot.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reports/process.hpp"

namespace pararnn::reports {
namespace {

// A gnuplot single-quoted string: literal, '' for a quote.
std::string gp_string(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out + "'";
}

// Colour-blind-safe palette (Okabe-Ito, then Tol's muted), cycled.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                                    "#882255", "#44AA99", "#999933", "#AA4499", "#332288", "#117733",
                                    "#661100", "#DDCC77"};
constexpr const char* kReferenceColour = "#555555";  // τ and other reference lines (color < 0)

bool shown(const Panel& panel, double x, double y) {
  if (!std::isfinite(x) || !std::isfinite(y)) return false;
  if (panel.logx && x <= 0.0) return false;
  if (panel.logy && y <= 0.0) return false;
  return true;
}

std::vector<std::pair<double, double>> shown_points(const Panel& panel, const Series& s) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, y] : s.points)
    if (shown(panel, x, y)) out.emplace_back(x, y);
  return out;
}

// The data file: one block per shown series (gnuplot `index`), in panel order.
std::string data_text(const Figure& figure) {
  std::string out;
  for (const Panel& panel : figure.panels)
    for (const Series& s : panel.series) {
      const auto points = shown_points(panel, s);
      if (points.empty()) continue;
      out += "# " + s.title + "\n";
      for (const auto& [x, y] : points) out += fmt::format("{:.17g} {:.17g}\n", x, y);
      out += "\n\n";
    }
  return out;
}

std::string panels_program(const Figure& figure, const std::string& data) {
  std::string out;
  const bool multi = figure.panels.size() > 1;
  if (multi)
    out += fmt::format("set multiplot layout {},1 title {} noenhanced\n", figure.panels.size(), gp_string(figure.title));
  int block = 0;
  for (const Panel& panel : figure.panels) {
    out += "unset label\nunset logscale\nset grid\nset xtics autofreq\nset autoscale x\n";
    out += panel.key_inside ? "set key inside right top noenhanced box opaque\n" : "set key outside right top noenhanced box\n";
    if (panel.integer_x) out += "set xtics 1\nset offsets 0.5, 0.5, 0, 0\n";
    else out += "set offsets 0, 0, 0, 0\n";
    out += fmt::format("set title {} noenhanced\n", gp_string(multi || !panel.title.empty() ? panel.title : figure.title));
    out += fmt::format("set xlabel {} noenhanced\nset ylabel {} noenhanced\n", gp_string(panel.xlabel), gp_string(panel.ylabel));
    if (panel.logx) out += "set logscale x 2\n";
    if (panel.logy) out += "set logscale y 10\nset format y '%.0e'\n";
    else out += "set format y '% g'\n";
    std::vector<std::string> items;
    for (const Series& s : panel.series) {
      if (shown_points(panel, s).empty()) continue;
      const char* colour =
          s.color < 0 ? kReferenceColour : kPalette[static_cast<std::size_t>(s.color) % std::size(kPalette)];
      const std::string style = s.points_only ? "points pt 7 ps 0.8"
                                              : (s.dashed ? "lines dt 2 lw 1.5" : "linespoints pt 7 ps 0.6 lw 1.5");
      items.push_back(fmt::format("{} index {} using 1:2 with {} lc rgb '{}' title {}", data, block, style, colour,
                                  gp_string(s.title)));
      ++block;
    }
    if (items.empty()) {
      out += "set label 'no data' at graph 0.5, graph 0.5 center\nunset logscale\nset format y '% g'\n"
             "plot [0:1][0:1] NaN notitle\n";
    } else {
      out += "plot ";
      for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", \\\n     " : "") + items[i];
      out += "\n";
    }
  }
  if (multi) out += "unset multiplot\n";
  return out;
}

}  // namespace

std::string gnuplot_program(const Figure& figure, const std::filesystem::path& data_file,
                            const std::filesystem::path& svg, const std::filesystem::path& png) {
  const std::string data = gp_string(data_file.string());
  const int height = figure.height * static_cast<int>(std::max<std::size_t>(1, figure.panels.size()));
  std::string out = "# pararnn report figure " + figure.name + "\nset encoding utf8\n";
  out += fmt::format("set terminal svg size {},{} fixed enhanced font 'Liberation Sans,12' background rgb 'white'\n",
                     figure.width, height);
  out += fmt::format("set output {}\n", gp_string(svg.string()));
  out += panels_program(figure, data);
  out += fmt::format("set terminal pngcairo size {},{} enhanced font 'Liberation Sans,11' background rgb 'white'\n",
                     figure.width, height);
  out += fmt::format("set output {}\n", gp_string(png.string()));
  out += panels_program(figure, data);
  out += "unset output\n";
  return out;
}

bool plotting_available() { return program_in_path("gnuplot"); }

void render_figure(const Figure& figure, const std::filesystem::path& dir) {
  if (!plotting_available())
    throw Error("plots need gnuplot (Debian package gnuplot-nox; scripts/install-deps.sh installs it), "
                "which is not in PATH; `pararnn report render --no-plots` writes the Markdown alone");
  const ScratchDirectory scratch(dir, ".plot-");
  const auto data = scratch.path() / "data.txt";
  const auto program = scratch.path() / "figure.gp";
  const auto svg = scratch.path() / "figure.svg";
  const auto png = scratch.path() / "figure.png";
  {
    std::ofstream(data) << data_text(figure);
    std::ofstream(program) << gnuplot_program(figure, data, svg, png);
  }
  const auto result = run_process({"gnuplot", program.string()});
  if (result.exit_code != 0 || !std::filesystem::exists(svg) || !std::filesystem::exists(png))
    throw Error(fmt::format("gnuplot failed on figure {} (exit {}): {}", figure.name, result.exit_code,
                            result.stderr_text));
  for (const auto& [from, suffix] : {std::pair{svg, ".svg"}, std::pair{png, ".png"}}) {
    std::ifstream in(from, std::ios::binary);
    write_file_atomically(dir / (figure.name + suffix), [&](std::ostream& out) { out << in.rdbuf(); });
  }
}

}  // namespace pararnn::reports
