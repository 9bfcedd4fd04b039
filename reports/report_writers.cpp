// The report's writers: one per format over the one model (reports/report_writers.h), with the
// Markdown and HTML table renderers and the page's CSS.
// Checked by: tests/reports/report_golden_test.cpp (report.md and tables.tex byte for byte),
// tests/reports/report_test.cpp and tests/reports/paper_report_test.cpp (escaping, the
// headless-browser render of index.html), tests/reports/headline_test.cpp (section order).
#include "reports/report_writers.h"

#include <algorithm>
#include <regex>

#include "base/error.h"
#include "base/names.h"
#include "reports/format.h"

namespace specbed {
namespace {

using report_format::kNone;

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '`':  // Markdown's code mark: never literal on the page (HtmlInline)
        out += "&#96;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Escaped text with its Markdown links "[text](target)" as <a href="target">text</a>.
std::string HtmlLinks(const std::string& escaped) {
  static const std::regex kLink(R"(\[([^\]]+)\]\(([^()\s]+)\))");
  return std::regex_replace(escaped, kLink, "<a href=\"$2\">$1</a>");
}

// `text` escaped (links as <a>), its **bold** spans as <strong> and an unpaired "**" as entities.
std::string HtmlBold(const std::string& text) {
  size_t pairs = 0;
  for (size_t at = text.find("**"); at != std::string::npos; at = text.find("**", at + 2)) ++pairs;
  std::string out;
  bool bold = false;
  size_t start = 0;
  for (size_t at = text.find("**"); at != std::string::npos; at = text.find("**", start)) {
    out += HtmlLinks(HtmlEscape(text.substr(start, at - start)));
    out += pairs % 2 != 0 ? "&#42;&#42;" : (bold ? "</strong>" : "<strong>");
    bold = !bold;
    start = at + 2;
  }
  return out + HtmlLinks(HtmlEscape(text.substr(start)));
}

// Text for the page: escaped, and the Markdown the report's sentences share with report.md turned
// into HTML: `code` -> <code>code</code>, **bold** -> <strong>bold</strong>; an unpaired backtick
// or "**" is written as entities, so no Markdown syntax reaches the page.
std::string HtmlInline(const std::string& s) {
  const bool paired = std::count(s.begin(), s.end(), '`') % 2 == 0;
  std::string out;
  bool code = false;
  size_t start = 0;
  while (true) {
    const size_t tick = paired ? s.find('`', start) : std::string::npos;
    const std::string part = s.substr(start, tick == std::string::npos ? tick : tick - start);
    out += code ? "<code>" + HtmlEscape(part) + "</code>" : HtmlBold(part);
    if (tick == std::string::npos) return out;
    code = !code;
    start = tick + 1;
  }
}

std::string MdCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// "Same in every row" line: ordinary constants, then the columns that have no data at all.
struct ConstantsText {
  std::vector<std::pair<std::string, std::string>> values;
  std::vector<std::string> no_data;
};
ConstantsText SplitConstants(const ReportTable& t) {
  ConstantsText out;
  for (const auto& [header, value] : t.constants) {
    if (value == kNone) {
      out.no_data.push_back(header);
    } else {
      out.values.emplace_back(header, value);
    }
  }
  return out;
}

std::string MarkdownTable(const ReportTable& t) {
  std::ostringstream s;
  const ConstantsText c = SplitConstants(t);
  if (!c.values.empty()) {
    s << "Same in every row: ";
    for (size_t i = 0; i < c.values.size(); ++i) {
      s << (i ? " · " : "") << "**" << MdCell(c.values[i].first) << "** "
        << MdCell(c.values[i].second);
    }
    s << "\n\n";
  }
  if (!c.no_data.empty()) {
    s << "No data (" << kNone << ") for: " << MdCell(Join(c.no_data, ", ")) << "\n\n";
  }
  s << "|";
  for (const auto& col : t.columns) {
    s << " " << MdCell(col.group.empty() ? col.header : col.group + " " + col.header) << " |";
  }
  s << "\n|";
  for (const auto& col : t.columns) s << (col.right_align ? "---:|" : "---|");
  s << "\n";
  for (const auto& row : t.rows) {
    s << "|";
    for (const auto& cell : row) s << " " << MdCell(cell) << " |";
    s << "\n";
  }
  return s.str();
}

// "a=1, b=2" -> <span class="token">a=1</span>, <span class="token">b=2</span> (escaped).
std::string WholeTokens(const std::string& cell) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t comma = cell.find(", ", start);
    out += "<span class=\"token\">" + HtmlInline(cell.substr(start, comma - start)) + "</span>";
    if (comma == std::string::npos) return out;
    out += ", ";
    start = comma + 2;
  }
}

std::string HtmlTable(const ReportTable& t) {
  std::ostringstream s;
  const ConstantsText c = SplitConstants(t);
  if (!c.values.empty()) {
    s << "<p class=\"constants\">Same in every row: ";
    for (size_t i = 0; i < c.values.size(); ++i) {
      s << (i ? " · " : "") << "<b>" << HtmlInline(c.values[i].first) << "</b> "
        << HtmlInline(c.values[i].second);
    }
    s << "</p>\n";
  }
  if (!c.no_data.empty()) {
    s << "<p class=\"constants\">No data (" << kNone
      << ") for: " << HtmlEscape(Join(c.no_data, ", ")) << "</p>\n";
  }
  s << "<div class=\"table-box\"><table>\n<thead>";
  bool has_groups = false;
  for (const auto& col : t.columns) has_groups = has_groups || !col.group.empty();
  if (has_groups) {
    s << "<tr>";
    for (size_t c = 0; c < t.columns.size();) {
      size_t e = c + 1;
      while (e < t.columns.size() && !t.columns[c].group.empty() &&
             t.columns[e].group == t.columns[c].group) {
        ++e;
      }
      s << "<th class=\"group\"" << (e - c > 1 ? StrCat(" colspan=\"", e - c, "\"") : "") << ">"
        << HtmlEscape(t.columns[c].group) << "</th>";
      c = e;
    }
    s << "</tr>";
  }
  s << "<tr>";
  for (const auto& col : t.columns) {
    s << "<th" << (col.right_align ? " class=\"num\"" : "") << ">" << HtmlInline(col.header)
      << "</th>";
  }
  s << "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    bool synthetic = false;
    for (const auto& cell : row)
      synthetic = synthetic || cell.find(kSyntheticMarker) != std::string::npos;
    s << (synthetic ? "<tr class=\"synthetic-row\">" : "<tr>");
    for (size_t i = 0; i < row.size(); ++i) {
      const bool titled = r < t.titles.size() && i < t.titles[r].size() && !t.titles[r][i].empty();
      s << "<td" << (t.columns[i].right_align ? " class=\"num\"" : "")
        << (titled ? " title=\"" + HtmlEscape(t.titles[r][i]) + "\"" : std::string()) << ">"
        << (t.columns[i].whole_tokens ? WholeTokens(row[i]) : HtmlInline(row[i])) << "</td>";
    }
    s << "</tr>\n";
  }
  s << "</tbody>\n</table></div>\n";
  return s.str();
}

constexpr const char* kCss = R"css(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1800px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafa; }
p.constants { font-size: 0.9em; color: #444; }
code { background: #f3f3f3; padding: 0 .25em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
.warning { background: #fff4e0; border: 1px solid #e0a040; padding: .5em; }
.synthetic { background: #c62828; color: #fff; font-weight: bold; padding: .6em 1em;
             font-size: 1.1em; }
th.group { text-align: center; }
td:not(.num) { overflow-wrap: break-word; }
.table-box { overflow-x: auto; max-width: 100%; margin: .8em 0; }
.table-box > table { margin: 0; }
span.token { white-space: nowrap; }
tr.synthetic-row td { background: #fde0e0; }
details > summary { cursor: pointer; }
details > summary > h2 { display: inline; }
details.provenance td:first-child { white-space: nowrap; font-weight: bold; }
details.provenance td { font-size: 0.85em; max-width: 40em; }
.headline { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.headline-table { flex: 1 1 20em; max-width: 100%; min-width: 0; }
.headline-table table { font-size: 0.85em; }
.headline-table td:first-child { overflow-wrap: normal; min-width: 8em; }
.headline-table table { border-collapse: separate; border-spacing: 0;
  border-top: 1px solid #ccc; border-left: 1px solid #ccc; }
.headline-table th, .headline-table td { border-width: 0 1px 1px 0; }
.headline-table th:first-child, .headline-table td:first-child { position: sticky; left: 0;
  background: #fff; z-index: 1; }
.headline-table tbody tr:nth-child(even) td:first-child { background: #fafafa; }
.headline-chart { flex: 0 1 auto; margin: 0; max-width: 100%; }
code { overflow-wrap: anywhere; }
p.setup { background: #f6f6f6; border-left: 4px solid #888; padding: .3em .6em; }
.slow-note { background: #f4f7ff; border: 1px solid #9ab; padding: .3em .8em; font-size: 0.9em; }
)css";

// " NAME=\"VALUE\"" (escaped), or nothing for an empty value.
std::string Attribute(const char* name, const std::string& value) {
  return value.empty() ? std::string() : StrCat(" ", name, "=\"", HtmlEscape(value), "\"");
}

}  // namespace

ReportBlock HeadingBlock(const std::string& text, int level, const std::string& html_id) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kHeading;
  b.text = text;
  b.level = level;
  b.html_id = html_id;
  return b;
}

ReportBlock ParagraphBlock(const std::string& text, bool md_escape, const std::string& html,
                           const std::string& html_class) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kParagraph;
  b.text = text;
  b.md_escape = md_escape;
  b.html = html;
  b.html_class = html_class;
  return b;
}

ReportBlock ListBlock(const std::vector<std::string>& items, bool md_escape) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kList;
  b.items = items;
  b.md_escape = md_escape;
  return b;
}

ReportBlock TableBlock(const ReportTable& table, const std::string& latex_comment,
                       const std::string& latex_caption) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kTable;
  b.table = table;
  b.latex_comment = latex_comment;
  b.latex_caption = latex_caption;
  return b;
}

ReportBlock FigureBlock(const Plot& figure) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kFigure;
  b.figure = figure;
  return b;
}

std::string ReportWriter::Write(const ReportDocument& doc) {
  out_.str("");
  Header(doc);
  for (const ReportBlock& block : doc.blocks) Block(block);
  Footer(doc);
  return out_.str();
}

// ---- Markdown ---------------------------------------------------------------------------------

void MarkdownWriter::Header(const ReportDocument& doc) {
  out_ << "# SpecBed report\n\n"
       << "Results database: `" << doc.db_path << "` · generated " << doc.generated
       << " by `specbed report`"
       << "\n\n";
}

void MarkdownWriter::Block(const ReportBlock& b) {
  using Kind = ReportBlock::Kind;
  auto text = [&](const std::string& s) { return b.md_escape ? MdCell(s) : s; };
  auto items = [&] {
    for (const auto& item : b.items) out_ << "- " << text(item) << "\n";
    out_ << "\n";
  };
  const Plot& p = b.figure;
  switch (b.kind) {
    case Kind::kHeading:
      out_ << std::string(b.level, '#') << " " << b.text << "\n\n";
      break;
    case Kind::kParagraph:
      out_ << text(b.text) << "\n\n";
      break;
    case Kind::kBanner:
      out_ << "> **" << MdCell(b.text) << "**\n\n";
      break;
    case Kind::kWarning:
      out_ << "> **Warning:** " << MdCell(b.text) << "\n\n";
      break;
    case Kind::kTable:
      out_ << MarkdownTable(b.table) << "\n";
      break;
    case Kind::kList:
      items();
      break;
    case Kind::kFigure:
      out_ << "![" << p.title << "](" << p.name << ".png)\n\n"
           << "*" << p.caption << "* ([SVG](" << p.name << ".svg))\n\n";
      break;
    case Kind::kChartAndTable:
      out_ << MarkdownTable(b.table) << "\n";
      if (!p.name.empty()) out_ << "![" << p.title << "](" << p.name << ".png)\n\n";
      break;
    case Kind::kNoteBox:
      out_ << "**" << b.title << "** " << text(b.text) << "\n\n";
      items();
      break;
    case Kind::kCollapsible:
      out_ << std::string(b.level, '#') << " " << b.text << "\n\n";
      for (const ReportBlock& child : b.children) Block(child);
      break;
  }
}

// ---- HTML -------------------------------------------------------------------------------------

void HtmlWriter::Header(const ReportDocument& doc) {
  images_.clear();
  out_ << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       << "<title>SpecBed report — " << HtmlEscape(doc.db_path) << "</title>\n<style>" << kCss
       << "</style>\n</head>\n<body>\n"
       << "<h1>SpecBed report</h1>\n<p>Results database: <code>" << HtmlEscape(doc.db_path)
       << "</code> · generated " << doc.generated << " by <code>specbed report</code></p>\n";
}

void HtmlWriter::Footer(const ReportDocument& /*doc*/) {
  out_ << "</body>\n</html>\n";
}

void HtmlWriter::Figure(const Plot& p, const std::string& css_class) {
  // At its natural size (width and height attributes; CSS only shrinks it to a narrower page).
  out_ << "<figure" << Attribute("class", css_class) << "><img src=\"" << HtmlEscape(p.name)
       << ".png\" alt=\"" << HtmlEscape(p.title) << "\" width=\"" << p.width << "\" height=\""
       << p.height << "\"><figcaption>" << HtmlInline(p.caption) << " (<a href=\""
       << HtmlEscape(p.name) << ".svg\">SVG</a>)</figcaption></figure>\n";
  images_.push_back(p.name + ".png");
}

void HtmlWriter::Block(const ReportBlock& b) {
  using Kind = ReportBlock::Kind;
  auto items = [&] {
    out_ << "<ul>\n";
    for (const auto& item : b.items) out_ << "<li>" << HtmlInline(item) << "</li>\n";
  };
  switch (b.kind) {
    case Kind::kHeading:
      out_ << "<h" << b.level << Attribute("id", b.html_id) << ">" << HtmlInline(b.text) << "</h"
           << b.level << ">\n";
      break;
    case Kind::kParagraph:
      out_ << "<p" << Attribute("id", b.html_id) << Attribute("class", b.html_class) << ">"
           << (b.html.empty() ? HtmlInline(b.text) : b.html) << "</p>\n";
      break;
    case Kind::kBanner:
      out_ << "<p class=\"synthetic\" id=\"synthetic-banner\">" << HtmlInline(b.text) << "</p>\n";
      break;
    case Kind::kWarning:
      out_ << "<p class=\"warning\"><b>Warning:</b> " << HtmlInline(b.text) << "</p>\n";
      break;
    case Kind::kTable:
      out_ << HtmlTable(b.table);
      break;
    case Kind::kList:
      items();
      out_ << "</ul>\n";
      break;
    case Kind::kFigure:
      Figure(b.figure, "");
      break;
    case Kind::kChartAndTable:  // the table first (method and speedup on a narrow screen)
      out_ << "<div class=\"headline\"><div class=\"headline-table\">" << HtmlTable(b.table)
           << "</div>\n";
      if (!b.figure.name.empty()) Figure(b.figure, "headline-chart");
      out_ << "</div>\n";
      break;
    case Kind::kNoteBox:
      out_ << "<div" << Attribute("class", b.html_class) << "><b>" << HtmlEscape(b.title) << "</b> "
           << HtmlInline(b.text);
      items();
      out_ << "</ul></div>\n";
      break;
    case Kind::kCollapsible:
      out_ << "<details" << Attribute("id", b.html_id) << Attribute("class", b.html_class)
           << "><summary><h" << b.level << ">" << HtmlEscape(b.text) << "</h" << b.level
           << "></summary>\n";
      for (const ReportBlock& child : b.children) Block(child);
      out_ << "</details>\n";
      break;
  }
}

// ---- LaTeX ------------------------------------------------------------------------------------

void LatexWriter::Header(const ReportDocument& doc) {
  out_ << "% SpecBed report tables (" << doc.db_path << ", generated " << doc.generated
       << " by specbed report).\n% Needs \\usepackage{booktabs}.\n\n";
}

void LatexWriter::Block(const ReportBlock& b) {
  if (b.kind == ReportBlock::Kind::kTable && !b.latex_caption.empty()) {
    out_ << "% " << b.latex_comment << "\n" << LatexTable(b.table, b.latex_caption) << "\n";
  }
  for (const ReportBlock& child : b.children) Block(child);
}

void LatexWriter::Footer(const ReportDocument& doc) {
  if (doc.latex_no_tables) out_ << "% No speculative cases: no tables.\n";
}

}  // namespace specbed
