// Figures of the reports, drawn by gnuplot (Debian's gnuplot-nox: its svg and pngcairo
// terminals), never by a drawing layer of our own. A Figure is data: panels of named series of
// (x, y) points; `render_figure` writes <dir>/<name>.svg and <dir>/<name>.png.
//
// Guarantees: both files are written atomically (write_file_atomically) after gnuplot succeeded,
// so a failure leaves neither behind; gnuplot's scratch files live in a directory that is
// removed in every case. Points a log axis cannot show (x or y <= 0, or not finite) are left
// out of the plot, never moved; a panel without any point shows "no data". Series titles keep
// their text as it is (no gnuplot markup), so an SVG holds each title verbatim in a <text>
// element. Example:
//   Figure f{.name = "error-f32", .panels = {{.title = "error vs T", .logx = true, .logy = true,
//            .series = {{.title = "gru solver", .points = {{64, 1e-7}, {1024, 3e-7}}}}}}};
//   render_figure(f, "out/plots");   // out/plots/error-f32.svg, out/plots/error-f32.png
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace pararnn::reports {

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;     // a floor or a reference beside the measured series
  bool points_only = false;
  int color = 0;           // index into one fixed palette (the same index, the same colour); < 0: grey
};

struct Panel {
  std::string title, xlabel, ylabel;
  bool logx = false, logy = false;
  bool key_inside = false;  // the legend inside the plot (panels of one figure keep one width)
  bool integer_x = false;   // x is a count (iterations): integer tics
  std::vector<Series> series;
};

struct Figure {
  std::string name;   // file stem: <name>.svg, <name>.png
  std::string title;  // above all panels
  std::vector<Panel> panels;
  int width = 1000, height = 600;  // per figure; panels share the height
};

// The gnuplot program of `figure` reading `data_file` and writing `svg` then `png` (exposed for
// tests and for a reader who wants to restyle a plot).
std::string gnuplot_program(const Figure& figure, const std::filesystem::path& data_file,
                            const std::filesystem::path& svg, const std::filesystem::path& png);

// Writes <dir>/<figure.name>.svg and .png. Throws pararnn::Error naming gnuplot's message when
// gnuplot is missing or fails (install it with scripts/install-deps.sh).
void render_figure(const Figure& figure, const std::filesystem::path& dir);

// Whether gnuplot is installed (PATH lookup).
bool plotting_available();

}  // namespace pararnn::reports
