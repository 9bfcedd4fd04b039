// Internal to specbed_reports: the report as one model (ReportDocument, an ordered list of blocks:
// headings, paragraphs, tables, lists, figures, the synthetic banner and warnings, collapsible
// sections) that WriteReport (reports/report.cpp) builds once, and one small writer per format
// that walks it (llama-bench's printers): MarkdownWriter (report.md), HtmlWriter (index.html) and
// LatexWriter (tables.tex, only the tables that carry a LaTeX caption). Where the formats differ
// (an HTML intro with a link, notes Markdown leaves unescaped, the headline's chart beside its
// table, the collapsed provenance) the block says so, so each writer keeps its exact output.
// Checked by: tests/reports/report_golden_test.cpp (report.md and tables.tex byte for byte),
// tests/reports/report_test.cpp, tests/reports/paper_report_test.cpp (files, escaping, the
// headless-browser render of index.html), tests/reports/headline_test.cpp (section order) and
// tests/reports/report_reading_test.cpp (viewport tag, no Markdown syntax, natural-size images).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "reports/plots.h"
#include "reports/report.h"

namespace specbed {

struct ReportBlock {
  enum class Kind {
    kHeading,  // text at `level` (Markdown "##", HTML <h2 id=html_id>)
    // text (HTML: escaped, its `code`, **bold** and [links](#id) as elements); `html` (raw HTML)
    // replaces it in HTML when not empty
    kParagraph,
    kBanner,   // the synthetic-acceptance banner: text
    kWarning,  // one report warning: text
    kTable,    // table; also in tables.tex when latex_caption is not empty
    kList,     // items (bullets)
    kFigure,   // figure: a rendered plot (PNG, SVG link, caption)
    // table and figure (no name: no chart): side by side in HTML (the table first, the chart
    // at its natural size beside or below it), the table then a bare image in Markdown (the
    // headline)
    kChartAndTable,
    kNoteBox,     // `title` in bold, text, then items (HTML: a div of class html_class)
    kCollapsible  // heading `text` at `level` over `children` (HTML: <details>, collapsed)
  };
  Kind kind = Kind::kParagraph;
  std::string text;
  std::string title;       // kNoteBox: its bold lead-in
  std::string html;        // kParagraph: raw HTML for index.html ("" = text, escaped)
  std::string html_id;     // kHeading, kParagraph, kCollapsible: the element's id ("" = none)
  std::string html_class;  // kParagraph, kNoteBox, kCollapsible: the element's class
  int level = 2;
  bool md_escape = true;  // Markdown: text and items through MdCell (| and line breaks)
  std::vector<std::string> items;
  ReportTable table;
  std::string latex_comment, latex_caption;  // kTable in tables.tex: "% comment" and caption
  Plot figure;
  std::vector<ReportBlock> children;
};

// Block constructors.
ReportBlock HeadingBlock(const std::string& text, int level, const std::string& html_id = "");
ReportBlock ParagraphBlock(const std::string& text, bool md_escape, const std::string& html = "",
                           const std::string& html_class = "");
ReportBlock ListBlock(const std::vector<std::string>& items, bool md_escape);
ReportBlock TableBlock(const ReportTable& table, const std::string& latex_comment = "",
                       const std::string& latex_caption = "");
ReportBlock FigureBlock(const Plot& figure);

struct ReportDocument {
  std::string db_path;
  std::string generated;  // UTC time stamp of the header lines
  std::vector<ReportBlock> blocks;
  // tables.tex says "No speculative cases" (no paper-layout and no paper-vs-measured table).
  bool latex_no_tables = false;
};

// Walks a document: Header, every block in order, Footer. Each format overrides the three.
class ReportWriter {
 public:
  virtual ~ReportWriter() = default;
  std::string Write(const ReportDocument& doc);

 protected:
  virtual void Header(const ReportDocument& doc) = 0;
  virtual void Block(const ReportBlock& block) = 0;
  virtual void Footer(const ReportDocument& /*doc*/) {}
  std::ostringstream out_;
};

// report.md: GitHub Markdown.
class MarkdownWriter : public ReportWriter {
 protected:
  void Header(const ReportDocument& doc) override;
  void Block(const ReportBlock& block) override;
};

// index.html: one self-contained page (inline CSS); images by relative path.
class HtmlWriter : public ReportWriter {
 public:
  // The PNG file names the page embeds, in page order (after Write).
  const std::vector<std::string>& images() const { return images_; }

 protected:
  void Header(const ReportDocument& doc) override;
  void Block(const ReportBlock& block) override;
  void Footer(const ReportDocument& doc) override;

 private:
  void Figure(const Plot& p, const std::string& css_class);
  std::vector<std::string> images_;
};

// tables.tex: the tables with a LaTeX caption (LatexTable), booktabs.
class LatexWriter : public ReportWriter {
 protected:
  void Header(const ReportDocument& doc) override;
  void Block(const ReportBlock& block) override;
  void Footer(const ReportDocument& doc) override;
};

}  // namespace specbed
