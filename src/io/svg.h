/* svg.h: line plots as standalone SVG text, for the HTML run reports (train/report.h).
 *
 * A plot is a rectangle of data coordinates drawn into a fixed-size SVG: axes with "nice" ticks
 * (1, 2, 5 x 10^k on linear axes, powers of 10 or of 2 on log axes), axis labels that carry the
 * unit, polylines (a NaN or, on a log axis, a value <= 0 breaks the line), markers, vertical marker
 * lines with a label, grouped bars over categories, and a legend below the axes. All text that
 * comes from users (titles, run names, labels from configs) is escaped for XML. The output uses no
 * fonts but the generic family sans-serif and no scripts, so it renders from disk and prints.
 * Out of scope: interactivity, filled areas, two y-axes, dates.
 */
#ifndef IMPLICIT_SVG_H
#define IMPLICIT_SVG_H

#include <stddef.h>

/* ---- a growable text buffer (also used for whole HTML pages) ------------------------------ */
typedef struct {
    char *data;   /* (cap) NUL-terminated text of len bytes; NULL until something is written */
    size_t len, cap;
    int failed;   /* sticky: an allocation failed, the text is incomplete */
} TextBuf;

void text_init(TextBuf *b);
void text_free(TextBuf *b);
void text_add(TextBuf *b, const char *s);
void text_addn(TextBuf *b, const char *s, size_t n);
void text_printf(TextBuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s escaped for XML / HTML text and attribute values: & < > " ' become entities; bytes below
 * 0x20 other than tab and newline (not allowed in XML 1.0) become U+FFFD. */
void text_escape(TextBuf *b, const char *s);

/* ---- scales and ticks --------------------------------------------------------------------- */
typedef enum { SVG_LINEAR = 0, SVG_LOG10 = 1, SVG_LOG2 = 2 } SvgScaleKind;

/* The data range [lo, hi] of an axis widened to nice ends, and its ticks (at most cap, about
 * `want`). Linear: the tick step is 1, 2 or 5 x 10^k and lo, hi become multiples of it. Log10:
 * lo, hi become powers of 10 (every decade ticked; 2 and 5 added within a single decade; every
 * second or more decade when there are many). Log2: powers of 2, every one or every k-th.
 * lo == hi is widened around the value; a log axis needs lo > 0. Returns the tick count. */
int svg_ticks(SvgScaleKind kind, double *lo, double *hi, int want, double *ticks, int cap);
/* Tick label of v on an axis whose ticks are `step` apart (linear; ignored for log axes):
 * as few decimals as the step needs, "k" / "M" for thousands / millions of round values,
 * 1e-5 style beyond that. Writes at most cap bytes; returns buf. */
char *svg_tick_label(SvgScaleKind kind, double v, double step, char *buf, size_t cap);
/* Map v in [lo, hi] of a scale to [a, b] (pixels); values outside extrapolate. */
double svg_map(SvgScaleKind kind, double lo, double hi, double a, double b, double v);

/* ---- plots ----------------------------------------------------------------------------------- */
#define SVG_MAX_SERIES 48
#define SVG_MAX_VLINES 32
#define SVG_N_COLORS 8

/* Colour i of the palette (colour-blind safe, Okabe-Ito order), as "#rrggbb". */
const char *svg_color(int i);

typedef enum { SVG_MARK_NONE = 0, SVG_MARK_CIRCLE, SVG_MARK_SQUARE, SVG_MARK_TRIANGLE, SVG_MARK_DIAMOND } SvgMarker;

typedef struct {
    int color;        /* palette index */
    double width;     /* stroke width in px (0: 1.6) */
    int dash;         /* 0 solid, 1 dashed, 2 dotted, 3 dash-dot */
    double opacity;   /* 0: 1 */
    SvgMarker marker; /* drawn at every point */
    int legend;       /* 1: listed in the legend (needs a label) */
} SvgStyle;

typedef struct SvgPlot SvgPlot;

/* A plot of width x height pixels (the plot area is what is left after margins and legend). */
SvgPlot *svg_plot_new(int width, int height, const char *title, const char *xlabel, const char *ylabel);
void svg_plot_free(SvgPlot *p);
/* The id attribute of the <svg> element (default "plot"); ids must be unique within a page. */
void svg_plot_id(SvgPlot *p, const char *id);
/* Axis kinds; fixed limits (NaN: from the data). */
void svg_plot_axes(SvgPlot *p, SvgScaleKind x, SvgScaleKind y);
void svg_plot_xlim(SvgPlot *p, double lo, double hi);
void svg_plot_ylim(SvgPlot *p, double lo, double hi);
/* A series of n points, copied. Returns 0, or -1 when the plot is full (the series is dropped). */
int svg_plot_line(SvgPlot *p, const double *x, const double *y, int n, const SvgStyle *st, const char *label);
/* A vertical line at x with a short label at its top (curriculum switches, the training length). */
void svg_plot_vline(SvgPlot *p, double x, const char *label, int color, int dash);
/* A highlighted point with a label beside it ("longest > 90%"). */
void svg_plot_note(SvgPlot *p, double x, double y, const char *label, int color);
/* Categorical x: n_cat category names; svg_plot_bars then adds one bar group member per call
 * (values per category). Bars and lines do not mix in one plot. */
void svg_plot_categories(SvgPlot *p, const char *const *names, int n_cat);
int svg_plot_bars(SvgPlot *p, const double *values, const SvgStyle *st, const char *label);
/* Number of points that will be drawn (finite, positive on log axes) over all series. */
int svg_plot_points(const SvgPlot *p);
/* Append the <svg> element to out. */
void svg_plot_render(const SvgPlot *p, TextBuf *out);

#endif
