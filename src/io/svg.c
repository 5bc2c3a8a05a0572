/* svg.c: see svg.h. */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text buffer ------------------------------------------------------------------------------ */
void text_init(TextBuf *b) { memset(b, 0, sizeof *b); }

void text_free(TextBuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int text_reserve(TextBuf *b, size_t extra) {
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return 0;
    }
    b->data = d;
    b->cap = cap;
    return 1;
}

void text_addn(TextBuf *b, const char *s, size_t n) {
    if (!text_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void text_add(TextBuf *b, const char *s) { text_addn(b, s, strlen(s)); }

void text_printf(TextBuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        text_addn(b, small, (size_t)n);
        return;
    }
    if (!text_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void text_escape(TextBuf *b, const char *s) {
    for (const char *p = s; p && *p; p++) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '&': text_add(b, "&amp;"); break;
        case '<': text_add(b, "&lt;"); break;
        case '>': text_add(b, "&gt;"); break;
        case '"': text_add(b, "&quot;"); break;
        case '\'': text_add(b, "&#39;"); break;
        default:
            if (c < 0x20 && c != '\t' && c != '\n') text_add(b, "\xEF\xBF\xBD");
            else text_addn(b, p, 1);
        }
    }
}

/* ---- scales --------------------------------------------------------------------------------- */
static double tval(SvgScaleKind k, double v) { return k == SVG_LINEAR ? v : k == SVG_LOG2 ? log2(v) : log10(v); }

double svg_map(SvgScaleKind kind, double lo, double hi, double a, double b, double v) {
    double l = tval(kind, lo), h = tval(kind, hi), x = tval(kind, v);
    return h > l ? a + (x - l) / (h - l) * (b - a) : (a + b) / 2;
}

/* The 1-2-5 sequence: the largest value <= v (down = 1) or the smallest >= v (down = 0). */
static double nice125(double v, int down) {
    double e = floor(log10(v)), m = v / pow(10, e);
    static const double steps[] = {1, 2, 5, 10};
    if (down) {
        double best = 1;
        for (int i = 0; i < 4; i++)
            if (steps[i] <= m * (1 + 1e-9)) best = steps[i];
        return best * pow(10, e);
    }
    for (int i = 0; i < 4; i++)
        if (steps[i] >= m * (1 - 1e-9)) return steps[i] * pow(10, e);
    return 10 * pow(10, e);
}

int svg_ticks(SvgScaleKind kind, double *lo, double *hi, int want, double *ticks, int cap) {
    double a = *lo, b = *hi;
    int n = 0;
    if (want < 2) want = 2;
    if (!(isfinite(a) && isfinite(b))) a = 0, b = 1;
    if (a > b) { double t = a; a = b; b = t; }
    if (kind != SVG_LINEAR && !(a > 0)) {   /* a log axis of non-positive data: show something sane */
        a = b > 0 ? b / 10 : 1;
        if (!(b > 0)) b = 10;
    }
    if (kind == SVG_LINEAR) {
        if (a == b) {
            double d = a == 0 ? 1 : fabs(a) * 0.1;
            a -= d, b += d;
        }
        double raw = (b - a) / (want - 1), mag = pow(10, floor(log10(raw))), f = raw / mag;
        double step = (f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10) * mag;
        a = floor(a / step + 1e-9) * step;
        b = ceil(b / step - 1e-9) * step;
        for (int k = 0; n < cap; k++) {
            double v = a + k * step;
            if (v > b + step * 1e-6) break;
            ticks[n++] = fabs(v) < step * 1e-9 ? 0 : v;
        }
    } else if (kind == SVG_LOG2) {
        int e0 = (int)floor(log2(a) + 1e-9), e1 = (int)ceil(log2(b) - 1e-9);
        if (e0 == e1) e0--, e1++;
        int every = (e1 - e0 + want - 1) / want;
        if (every < 1) every = 1;
        a = ldexp(1, e0), b = ldexp(1, e1);
        for (int e = e0; e <= e1 && n < cap; e++)
            if ((e - e0) % every == 0) ticks[n++] = ldexp(1, e);
    } else {
        if (a == b) a /= 2, b *= 2;
        a = nice125(a, 1), b = nice125(b, 0);
        int e0 = (int)floor(log10(a) + 1e-9), e1 = (int)ceil(log10(b) - 1e-9), fine = 0;
        /* the 1-2-5 values between the ends, when there are few enough */
        for (double v = a; v <= b * (1 + 1e-9); v = nice125(v * 1.5, 0)) fine++;
        if (fine <= want + 2) {
            for (double v = a; v <= b * (1 + 1e-9) && n < cap; v = nice125(v * 1.5, 0)) ticks[n++] = v;
        } else {
            int every = (e1 - e0 + want) / (want + 1);
            if (every < 1) every = 1;
            for (int e = e0; e <= e1 && n < cap; e++) {
                double v = pow(10, e);
                if (e % every == 0 && v >= a * (1 - 1e-9) && v <= b * (1 + 1e-9)) ticks[n++] = v;
            }
        }
    }
    *lo = a, *hi = b;
    return n;
}

/* v with the fewest decimals that show a step of `step`. */
static void fixed(char *buf, size_t cap, double v, double step, const char *suffix) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 9) dec = 9;
    snprintf(buf, cap, "%.*f%s", dec, v, suffix);
    if (!strncmp(buf, "-0", 2) && strspn(buf + 1, "0.") == strlen(buf + 1) - strlen(suffix))
        memmove(buf, buf + 1, strlen(buf));   /* "-0.00" -> "0.00" */
}

/* 1e-5 style (mantissa without trailing zeros, exponent without padding). */
static void sci(char *buf, size_t cap, double v) {
    int e = (int)floor(log10(fabs(v)) + 1e-9);
    double m = v / pow(10, e);
    if (fabs(m - round(m)) < 1e-6) snprintf(buf, cap, "%.0fe%d", m, e);
    else snprintf(buf, cap, "%.2ge%d", m, e);
}

char *svg_tick_label(SvgScaleKind kind, double v, double step, char *buf, size_t cap) {
    double a = fabs(v);
    if (v == 0) {
        snprintf(buf, cap, "0");
    } else if (kind == SVG_LOG2 && a >= 1 && a < 1e7) {
        snprintf(buf, cap, "%.0f", v);
    } else if (kind != SVG_LINEAR) {
        if (a >= 1e-3 && a < 1e4) snprintf(buf, cap, "%g", v);
        else if (a >= 1e4 && a < 1e6 && fmod(a, 1000) == 0) snprintf(buf, cap, "%gk", v / 1e3);
        else if (a >= 1e6 && a < 1e9 && fmod(a, 1e6) == 0) snprintf(buf, cap, "%gM", v / 1e6);
        else sci(buf, cap, v);
    } else if (a >= 1e9 || (a < 1e-4 && step < 1e-4)) {
        sci(buf, cap, v);
    } else if (step >= 1e5 && a >= 1e6) {
        fixed(buf, cap, v / 1e6, step / 1e6, "M");
    } else if (step >= 100 && a >= 1e4) {
        fixed(buf, cap, v / 1e3, step / 1e3, "k");
    } else {
        fixed(buf, cap, v, step, "");
    }
    return buf;
}

/* ---- plots ------------------------------------------------------------------------------------ */
static const char *const PALETTE[SVG_N_COLORS] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                                  "#e69f00", "#56b4e9", "#000000", "#999999"};

const char *svg_color(int i) { return PALETTE[((i % SVG_N_COLORS) + SVG_N_COLORS) % SVG_N_COLORS]; }

typedef struct {
    double *x, *y;
    int n;
    SvgStyle st;
    char *label;
} Series;

typedef struct {
    double x, y;
    char *label;
    int color, dash;
} Mark;

struct SvgPlot {
    int w, h;
    char *title, *xlabel, *ylabel, *id;
    SvgScaleKind xk, yk;
    double xlo, xhi, ylo, yhi;   /* fixed limits, NaN = auto */
    Series s[SVG_MAX_SERIES];
    int ns;
    Mark vl[SVG_MAX_VLINES], notes[SVG_MAX_VLINES];
    int nv, nn;
    char **cats;   /* categorical x (bars) */
    int ncat;
};

static char *dup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

SvgPlot *svg_plot_new(int width, int height, const char *title, const char *xlabel, const char *ylabel) {
    SvgPlot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->w = width, p->h = height;
    p->title = dup(title), p->xlabel = dup(xlabel), p->ylabel = dup(ylabel), p->id = dup("plot");
    p->xlo = p->xhi = p->ylo = p->yhi = NAN;
    return p;
}

void svg_plot_free(SvgPlot *p) {
    if (!p) return;
    for (int i = 0; i < p->ns; i++) free(p->s[i].x), free(p->s[i].y), free(p->s[i].label);
    for (int i = 0; i < p->nv; i++) free(p->vl[i].label);
    for (int i = 0; i < p->nn; i++) free(p->notes[i].label);
    for (int i = 0; i < p->ncat; i++) free(p->cats[i]);
    free(p->cats);
    free(p->title), free(p->xlabel), free(p->ylabel), free(p->id);
    free(p);
}

void svg_plot_id(SvgPlot *p, const char *id) {
    free(p->id);
    p->id = dup(id);
}

void svg_plot_axes(SvgPlot *p, SvgScaleKind x, SvgScaleKind y) { p->xk = x, p->yk = y; }
void svg_plot_xlim(SvgPlot *p, double lo, double hi) { p->xlo = lo, p->xhi = hi; }
void svg_plot_ylim(SvgPlot *p, double lo, double hi) { p->ylo = lo, p->yhi = hi; }

int svg_plot_line(SvgPlot *p, const double *x, const double *y, int n, const SvgStyle *st, const char *label) {
    if (p->ns >= SVG_MAX_SERIES || n < 0) return -1;
    Series *s = &p->s[p->ns];
    size_t bytes = sizeof(double) * (size_t)(n > 0 ? n : 1);
    s->x = malloc(bytes), s->y = malloc(bytes);
    if (!s->x || !s->y) {
        free(s->x), free(s->y);
        return -1;
    }
    if (n) memcpy(s->x, x, sizeof(double) * (size_t)n), memcpy(s->y, y, sizeof(double) * (size_t)n);
    s->n = n;
    s->st = *st;
    s->label = dup(label);
    p->ns++;
    return 0;
}

void svg_plot_vline(SvgPlot *p, double x, const char *label, int color, int dash) {
    if (p->nv < SVG_MAX_VLINES) p->vl[p->nv++] = (Mark){x, NAN, dup(label), color, dash};
}

void svg_plot_note(SvgPlot *p, double x, double y, const char *label, int color) {
    if (p->nn < SVG_MAX_VLINES) p->notes[p->nn++] = (Mark){x, y, dup(label), color, 0};
}

void svg_plot_categories(SvgPlot *p, const char *const *names, int n_cat) {
    p->cats = calloc((size_t)(n_cat > 0 ? n_cat : 1), sizeof *p->cats);
    if (!p->cats) return;
    p->ncat = n_cat;
    for (int i = 0; i < n_cat; i++) p->cats[i] = dup(names[i]);
    p->xk = SVG_LINEAR;
}

int svg_plot_bars(SvgPlot *p, const double *values, const SvgStyle *st, const char *label) {
    double *x = malloc(sizeof(double) * (size_t)(p->ncat > 0 ? p->ncat : 1));
    if (!x) return -1;
    for (int i = 0; i < p->ncat; i++) x[i] = i;
    int rc = svg_plot_line(p, x, values, p->ncat, st, label);
    free(x);
    return rc;
}

static int valid(SvgScaleKind k, double v) { return isfinite(v) && (k == SVG_LINEAR || v > 0); }

int svg_plot_points(const SvgPlot *p) {
    int n = 0;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++) n += valid(p->xk, p->s[i].x[j]) && valid(p->yk, p->s[i].y[j]);
    return n;
}

static void widen(double *lo, double *hi, double v) {
    if (!(v >= *lo)) *lo = v;
    if (!(v <= *hi)) *hi = v;
}

static const char *dash_array(int dash) {
    static const char *const D[] = {"", " stroke-dasharray=\"6 4\"", " stroke-dasharray=\"2 3\"",
                                    " stroke-dasharray=\"8 3 2 3\""};
    return D[((dash % 4) + 4) % 4];
}

static void marker(TextBuf *o, SvgMarker m, double x, double y, const char *color) {
    switch (m) {
    case SVG_MARK_NONE: break;
    case SVG_MARK_CIRCLE: text_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", x, y, color); break;
    case SVG_MARK_SQUARE:
        text_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" fill=\"%s\"/>", x - 3, y - 3, color);
        break;
    case SVG_MARK_TRIANGLE:
        text_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y - 4, x + 3.5, y + 2.5, x - 3.5,
                    y + 2.5, color);
        break;
    case SVG_MARK_DIAMOND:
        text_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>", x, y - 4, x + 4, y, x,
                    y + 4, x - 4, y, color);
        break;
    }
}

/* Rough width of text at font size fs (sans-serif averages ~0.56 em per character). */
static double text_w(const char *s, double fs) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
    return 0.56 * fs * (double)n;
}

typedef struct {
    double x0, x1, y0, y1;   /* plot area in px: x0 left, y0 top */
    double xlo, xhi, ylo, yhi;
} Frame;

static double px(const SvgPlot *p, const Frame *f, double v) {
    if (p->ncat) return f->x0 + (v + 0.5) / p->ncat * (f->x1 - f->x0);
    return svg_map(p->xk, f->xlo, f->xhi, f->x0, f->x1, v);
}
static double py(const SvgPlot *p, const Frame *f, double v) { return svg_map(p->yk, f->ylo, f->yhi, f->y1, f->y0, v); }

/* Legend layout: items left to right, wrapping at the plot width; returns the rows. */
static int legend_rows(const SvgPlot *p, double width) {
    double x = 0;
    int rows = 0;
    for (int i = 0; i < p->ns; i++) {
        if (!p->s[i].st.legend || !p->s[i].label) continue;
        double w = 30 + text_w(p->s[i].label, 11) + 14;
        if (rows == 0 || x + w > width) rows++, x = 0;
        x += w;
    }
    return rows;
}

static void render_legend(const SvgPlot *p, TextBuf *o, double x0, double width, double top) {
    double x = 0, y = top - 16;
    int rows = 0;
    for (int i = 0; i < p->ns; i++) {
        const Series *s = &p->s[i];
        if (!s->st.legend || !s->label) continue;
        double w = 30 + text_w(s->label, 11) + 14;
        if (rows == 0 || x + w > width) rows++, x = 0, y += 16;
        const char *c = svg_color(s->st.color);
        double lx = x0 + x, ly = y + 8;
        if (p->ncat) {
            text_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"8\" fill=\"%s\"/>", lx, ly - 4, c);
        } else {
            text_printf(o, "<path d=\"M%.1f %.1fH%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s fill=\"none\"/>", lx, ly,
                        lx + 22, c, s->st.width > 0 ? s->st.width : 1.6, dash_array(s->st.dash));
            marker(o, s->st.marker, lx + 11, ly, c);
        }
        text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" class=\"lg\">", lx + 28, ly + 4);
        text_escape(o, s->label);
        text_add(o, "</text>");
        x += w;
    }
}

void svg_plot_render(const SvgPlot *p, TextBuf *o) {
    const double ml = 64, mr = 18, mt = 30, mb = 46;
    Frame f = {ml, p->w - mr, mt, p->h - mb, INFINITY, -INFINITY, INFINITY, -INFINITY};
    int rows = legend_rows(p, f.x1 - f.x0);
    double H = p->h + rows * 16 + (rows ? 6 : 0);
    /* data range */
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++)
            if (valid(p->xk, p->s[i].x[j]) && valid(p->yk, p->s[i].y[j]))
                widen(&f.xlo, &f.xhi, p->s[i].x[j]), widen(&f.ylo, &f.yhi, p->s[i].y[j]);
    for (int i = 0; i < p->nv; i++)
        if (valid(p->xk, p->vl[i].x)) widen(&f.xlo, &f.xhi, p->vl[i].x);
    if (p->ncat) {
        f.xlo = -0.5, f.xhi = p->ncat - 0.5;
        if (p->yk == SVG_LINEAR) widen(&f.ylo, &f.yhi, 0);
    }
    if (!(f.xlo <= f.xhi)) f.xlo = p->xk == SVG_LINEAR ? 0 : 1, f.xhi = p->xk == SVG_LINEAR ? 1 : 10;
    if (!(f.ylo <= f.yhi)) f.ylo = p->yk == SVG_LINEAR ? 0 : 1, f.yhi = p->yk == SVG_LINEAR ? 1 : 10;
    if (!isnan(p->xlo)) f.xlo = p->xlo;
    if (!isnan(p->xhi)) f.xhi = p->xhi;
    if (!isnan(p->ylo)) f.ylo = p->ylo;
    if (!isnan(p->yhi)) f.yhi = p->yhi;
    double xt[64], yt[64];
    int nxt = 0, nyt = svg_ticks(p->yk, &f.ylo, &f.yhi, 5, yt, 64);
    if (!p->ncat) nxt = svg_ticks(p->xk, &f.xlo, &f.xhi, 7, xt, 64);
    double xstep = nxt > 1 ? xt[1] - xt[0] : 1, ystep = nyt > 1 ? yt[1] - yt[0] : 1;

    text_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"");
    text_escape(o, p->id);
    text_printf(o, "\" class=\"plot\" viewBox=\"0 0 %d %.0f\" width=\"%d\" height=\"%.0f\" role=\"img\">", p->w, H, p->w, H);
    text_add(o, "<style>text{font-family:sans-serif;font-size:11px;fill:#222}.t{font-size:13px;font-weight:bold}"
                ".ax{font-size:12px}.lg{font-size:11px}.g{stroke:#e4e4e4;stroke-width:1}.fr{stroke:#444;fill:none}"
                ".vl{font-size:10px;fill:#555}</style>");
    text_add(o, "<title>");
    text_escape(o, p->title ? p->title : "");
    text_add(o, "</title>");
    text_printf(o, "<rect width=\"%d\" height=\"%.0f\" fill=\"#fff\"/>", p->w, H);
    if (p->title) {
        text_printf(o, "<text x=\"%.0f\" y=\"18\" class=\"t\">", ml);
        text_escape(o, p->title);
        text_add(o, "</text>");
    }
    /* grid and ticks */
    char lab[48];
    for (int i = 0; i < nyt; i++) {
        double y = py(p, &f, yt[i]);
        text_printf(o, "<path class=\"g\" d=\"M%.1f %.1fH%.1f\"/>", f.x0, y, f.x1);
        text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>", f.x0 - 5, y + 4,
                    svg_tick_label(p->yk, yt[i], ystep, lab, sizeof lab));
    }
    for (int i = 0; i < nxt; i++) {
        double x = px(p, &f, xt[i]);
        text_printf(o, "<path class=\"g\" d=\"M%.1f %.1fV%.1f\"/>", x, f.y0, f.y1);
        text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", x, f.y1 + 15,
                    svg_tick_label(p->xk, xt[i], xstep, lab, sizeof lab));
    }
    for (int i = 0; i < p->ncat; i++) {
        text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px(p, &f, i), f.y1 + 15);
        text_escape(o, p->cats[i]);
        text_add(o, "</text>");
    }
    text_printf(o, "<rect class=\"fr\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", f.x0, f.y0, f.x1 - f.x0,
                f.y1 - f.y0);
    if (p->xlabel) {
        text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"ax\">", (f.x0 + f.x1) / 2, f.y1 + 33);
        text_escape(o, p->xlabel);
        text_add(o, "</text>");
    }
    if (p->ylabel) {
        text_printf(o, "<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\" class=\"ax\">",
                    (f.y0 + f.y1) / 2);
        text_escape(o, p->ylabel);
        text_add(o, "</text>");
    }
    /* vertical marks */
    for (int i = 0; i < p->nv; i++) {
        const Mark *m = &p->vl[i];
        if (!valid(p->xk, m->x)) continue;
        double x = px(p, &f, m->x);
        if (x < f.x0 - 0.5 || x > f.x1 + 0.5) continue;
        text_printf(o, "<path d=\"M%.1f %.1fV%.1f\" stroke=\"%s\" stroke-width=\"1.2\"%s fill=\"none\"/>", x, f.y0, f.y1,
                    svg_color(m->color), dash_array(m->dash));
        if (m->label) {
            int right = x > (f.x0 + f.x1) / 2;
            text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" class=\"vl\" text-anchor=\"%s\">", right ? x - 3 : x + 3,
                        f.y0 + 11 + 11 * (i % 3), right ? "end" : "start");
            text_escape(o, m->label);
            text_add(o, "</text>");
        }
    }
    /* series: bars or lines */
    int nbars = 0;
    for (int i = 0; i < p->ns; i++) nbars += p->ncat > 0;
    double band = p->ncat ? (f.x1 - f.x0) / p->ncat : 0, bw = nbars ? band * 0.8 / nbars : 0;
    for (int i = 0, bar = 0; i < p->ns; i++) {
        const Series *s = &p->s[i];
        const char *c = svg_color(s->st.color);
        double op = s->st.opacity > 0 ? s->st.opacity : 1;
        if (p->ncat) {
            double base = py(p, &f, p->yk == SVG_LINEAR && f.ylo <= 0 ? 0 : f.ylo);
            text_printf(o, "<g fill=\"%s\" fill-opacity=\"%.2f\">", c, op);
            for (int j = 0; j < s->n; j++) {
                if (!valid(p->yk, s->y[j])) continue;
                double x = f.x0 + j * band + band * 0.1 + bar * bw, y = py(p, &f, s->y[j]);
                text_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x, y < base ? y : base, bw,
                            fabs(base - y));
            }
            text_add(o, "</g>");
            bar++;
            continue;
        }
        TextBuf d;
        text_init(&d);
        int pen = 0;
        for (int j = 0; j < s->n; j++) {
            if (!valid(p->xk, s->x[j]) || !valid(p->yk, s->y[j])) { pen = 0; continue; }
            text_printf(&d, "%c%.1f %.1f", pen ? 'L' : 'M', px(p, &f, s->x[j]), py(p, &f, s->y[j]));
            pen = 1;
        }
        if (d.len) {
            text_printf(o, "<path d=\"%s\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\"%s fill=\"none\" "
                           "stroke-linejoin=\"round\"/>", d.data, c, s->st.width > 0 ? s->st.width : 1.6, op,
                        dash_array(s->st.dash));
            /* a single point draws no visible line: give it a marker */
            SvgMarker mk = s->st.marker ? s->st.marker : (strchr(d.data + 1, 'L') ? SVG_MARK_NONE : SVG_MARK_CIRCLE);
            for (int j = 0; j < s->n && mk; j++)
                if (valid(p->xk, s->x[j]) && valid(p->yk, s->y[j])) marker(o, mk, px(p, &f, s->x[j]), py(p, &f, s->y[j]), c);
        }
        text_free(&d);
    }
    for (int i = 0; i < p->nn; i++) {
        const Mark *m = &p->notes[i];
        if (!valid(p->xk, m->x) || !valid(p->yk, m->y)) continue;
        double x = px(p, &f, m->x), y = py(p, &f, m->y);
        int right = x > (f.x0 + f.x1) * 0.6;
        text_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>", x, y,
                    svg_color(m->color));
        if (m->label) {
            text_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"vl\">", right ? x - 9 : x + 9,
                        y > f.y0 + 20 ? y - 8 : y + 16, right ? "end" : "start");
            text_escape(o, m->label);
            text_add(o, "</text>");
        }
    }
    if (rows) render_legend(p, o, f.x0, f.x1 - f.x0, p->h + 2);
    text_add(o, "</svg>\n");
}
