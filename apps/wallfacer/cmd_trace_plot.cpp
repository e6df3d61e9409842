// wallfacer trace-plot: a PNG timeline of a trace file (docs/trace.md) with gnuplot: one row per
// rank, its sequential ops on top (compute, collectives, waits) and its transfers in flight below.

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/trace.h"

namespace wallfacer::cli {
namespace {

namespace fs = std::filesystem;

struct PlotOptions {
  std::string input, out = "timeline.png", title;
  int width = 1000;
};

// A gnuplot string literal holding `s` as it is: single quotes, in which gnuplot substitutes
// nothing (no backquoted commands, no escapes), a quote doubled, control characters dropped.
std::string gnuplot_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) continue;
    out += c;
    if (c == '\'') out += c;
  }
  return out + "'";
}

// The trace file's timeline (UsageError naming the file when it cannot be read or is empty).
trace::Timeline read_trace(const PlotOptions& o) {
  trace::Timeline t;
  try {
    t = trace::read_timeline(read_file(o.input));
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("'{}': {}", o.input, e.what()));
  }
  WF_USAGE_CHECK(!t.spans.empty(), "'{}' holds no spans", o.input);
  return t;
}

// Boxes by colour in dir/{compute,comm,wait}.dat: x (ms) from, to; y from, to. Row r spans y in
// [-r - 0.45, -r + 0.45]. Returns the end of the last span (ms).
double write_boxes(const trace::Timeline& t, const fs::path& dir) {
  std::map<std::string, std::ofstream> files;
  for (const char* k : {"compute", "comm", "wait"}) files[k].open(dir / (std::string(k) + ".dat"));
  double t_end = 0;
  for (const auto& s : t.spans) {
    if (s.cat == "phase") continue;
    const std::string kind = s.cat == "wait" ? "wait" : s.cat == "comm" ? "comm" : "compute";
    const double x0 = s.ts * 1e-3, x1 = (s.ts + s.dur) * 1e-3, y = -double(s.rank);
    // Sequential ops fill the upper part of the row, transfers in flight the lower part.
    const double y0 = s.lane == 0 ? y - 0.05 : y - 0.42, y1 = s.lane == 0 ? y + 0.42 : y - 0.12;
    files[kind] << fmt::format("{} {} {} {} {} {}\n", 0.5 * (x0 + x1), 0.5 * (y0 + y1), x0, x1, y0,
                               y1);
    t_end = std::max(t_end, x1);
  }
  for (auto& [k, f] : files) {
    f << "NaN NaN NaN NaN NaN NaN\n";  // an empty category still plots (its key entry)
    f.close();
  }
  return t_end;
}

// The y axis: one row per rank, and with several nodes the host beside each rank and a line
// between nodes.
void write_rank_rows(std::ostream& gp, const trace::Timeline& t) {
  const int ranks = t.ranks;
  gp << "set ytics (";
  std::vector<std::string> hosts = t.hosts;
  hosts.resize(static_cast<size_t>(ranks));
  const bool nodes =
      std::any_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h != hosts[0]; });
  for (int r = 0; r < ranks; ++r)
    gp << (r ? ", " : "")
       << fmt::format(
              "{} {}",
              gnuplot_string(fmt::format("rank {}{}", r, nodes ? " · " + hosts[size_t(r)] : "")),
              -r);
  gp << ")\n";
  for (int r = 1; r < ranks && nodes; ++r)
    if (hosts[size_t(r)] != hosts[size_t(r) - 1])
      gp << fmt::format(
          "set arrow from graph 0,first {0} to graph 1,first {0} nohead lw 2 "
          "lc rgb '#444444' front\n",
          0.5 - r);
}

// The gnuplot script that draws the boxes of `dir` into `png`.
void write_script(const fs::path& script, const PlotOptions& o, const trace::Timeline& t,
                  const fs::path& dir, const std::string& png, double t_end) {
  const int ranks = t.ranks;
  std::ofstream gp(script);
  const int height = std::clamp(130 + 42 * ranks, 240, 4000);
  gp << fmt::format("set terminal png size {},{} font 'sans,9'\n", o.width, height)
     << fmt::format("set output {}\n", gnuplot_string(png))
     << fmt::format("set title {} offset 0,0.4\n",
                    gnuplot_string(o.title.empty() ? t.title : o.title))
     << "set xlabel \"time (ms)     row: upper bar the rank's ops in order, lower bar its "
        "transfers in flight\"\nset yrange ["
     << -double(ranks) + 0.4 << ":0.6]\n"
     << fmt::format("set xrange [0:{}]\n", t_end > 0 ? t_end * 1.01 : 1.0);
  write_rank_rows(gp, t);
  gp << "set grid xtics\nset key outside bottom center horizontal\nset bmargin 5\n"
     << "set style fill solid 0.85 noborder\n";
  if (t.backward_start_us > 0 && (t.command == "attn" || t.command == "plan"))
    gp << fmt::format(
        "set arrow from {0},graph 0 to {0},graph 1 nohead dt 2 lw 1.5 lc rgb '#222222' front\n"
        "set label 'backward' at {0},graph 1 offset 0.3,0.5 font ',8' tc rgb '#222222' front\n",
        t.backward_start_us * 1e-3);
  gp << "plot " << gnuplot_string((dir / "compute.dat").string())
     << " using 1:2:3:4:5:6 with boxxyerror lc rgb '#3a9d4f' title 'compute', \\\n"
     << "     " << gnuplot_string((dir / "comm.dat").string())
     << " using 1:2:3:4:5:6 with boxxyerror lc rgb '#3b6fd0' title 'communication', \\\n"
     << "     " << gnuplot_string((dir / "wait.dat").string())
     << " using 1:2:3:4:5:6 with boxxyerror lc rgb '#d9412b' title 'wait'\n";
}

// Runs gnuplot on the script (then removes `dir`) and renames its complete PNG to `out`; nothing
// half-written is left when it fails.
void draw(const fs::path& script, const fs::path& dir, const std::string& png,
          const std::string& out) {
  const int rc = std::system(fmt::format("gnuplot '{}' >/dev/null 2>&1", script.string()).c_str());
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (rc != 0 || !png_complete(png)) {
    fs::remove(png, ec);
    // The shell's status 127: the command was not found.
    WF_USAGE_CHECK(!(WIFEXITED(rc) && WEXITSTATUS(rc) == 127),
                   "gnuplot is not installed: install it (e.g. the package gnuplot-nox) to draw "
                   "'{}'",
                   out);
    throw Error(fmt::format(
        "gnuplot could not write '{}' completely (a full disk, or a folder that cannot be "
        "written?)",
        out));
  }
  fs::rename(png, out, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(png, ec);
    throw Error(fmt::format("cannot rename the finished plot to '{}': {}", out, why));
  }
}

int run_plot(const PlotOptions& o) {
  WF_USAGE_CHECK(!o.input.empty(),
                 "trace-plot needs a trace file (wallfacer trace-plot FILE.json)");
  WF_USAGE_CHECK(o.width >= 200 && o.width <= 8000, "--width must lie in 200..8000 (got {})",
                 o.width);
  const trace::Timeline t = read_trace(o);
  check_output_folder(o.out, "--out");
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("wallfacer-trace-plot-{}", static_cast<long>(::getpid()));
  fs::create_directories(dir);
  const double t_end = write_boxes(t, dir);
  const std::string tmp_png = o.out + ".tmp";
  const fs::path script = dir / "plot.gp";
  write_script(script, o, t, dir, tmp_png, t_end);
  draw(script, dir, tmp_png, o.out);
  std::printf("%s: %d ranks, %zu spans\n", o.out.c_str(), t.ranks, t.spans.size());
  return 0;
}

Action setup(CLI::App& root) {
  auto o = std::make_shared<PlotOptions>();
  auto* cmd = root.add_subcommand(
      "trace-plot", "Draw a trace file (attn/train/plan --trace) as a PNG timeline with gnuplot");
  cmd->add_option("file", o->input, "trace file (Chrome trace JSON; required)");
  cmd->add_option("--out", o->out, "PNG to write")->capture_default_str();
  cmd->add_option("--title", o->title, "title (default: from the file's metadata)");
  cmd->add_option("--width", o->width, "width in pixels")->capture_default_str();
  return [o] { return run_plot(*o); };
}

WALLFACER_COMMAND(65, "trace-plot", setup);

}  // namespace
}  // namespace wallfacer::cli
