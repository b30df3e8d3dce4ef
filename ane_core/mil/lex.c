/* The MIL lexer (see lex.h). */
#include "lex.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void mil_lex_init(mil_lexer *lex, const char *text, size_t length, const char *source, ane_error *err) {
    memset(lex, 0, sizeof *lex);
    lex->text = lex->cursor = lex->line_start = text;
    lex->end = text + length;
    lex->line = 1;
    lex->source = source;
    lex->err = err;
    mil_lex_next(lex);
}

int mil_lex_failed(const mil_lexer *p) { return p->status != ANE_OK; }

/* Records an error at a token: "<source>:<line>:<col>: message", the line, a caret. */
void mil_lex_fail_at(mil_lexer *p, const token *at, const char *format, ...) {
    if (mil_lex_failed(p)) return;
    char message[400];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    const char *line_end = at->line_start;
    while (line_end < p->end && *line_end != '\n' && line_end - at->line_start < 200) line_end++;
    int line_length = (int)(line_end - at->line_start);
    char caret[210];
    int caret_at = at->column - 1 < line_length ? at->column - 1 : line_length;
    if (caret_at < 0) caret_at = 0;
    if (caret_at > 200) caret_at = 200;
    for (int i = 0; i < caret_at; i++) caret[i] = at->line_start[i] == '\t' ? '\t' : ' ';
    caret[caret_at] = '^';
    caret[caret_at + 1] = '\0';
    char line_text[210];
    int shown = 0;
    for (int i = 0; i < line_length && shown < 200; i++) {
        unsigned char c = (unsigned char)at->line_start[i];
        line_text[shown++] = (c == '\t' || (c >= 32 && c < 127) || c >= 128) ? (char)c : '?';
    }
    line_text[shown] = '\0';
    p->status = ane_fail(p->err, ANE_ERR_FORMAT, "%s:%d:%d: %s\n    %s\n    %s", p->source, at->line, at->column, message,
                         line_text, caret);
}

static void skip_space_and_comments(mil_lexer *p) {
    for (;;) {
        while (p->cursor < p->end && isspace((unsigned char)*p->cursor)) {
            if (*p->cursor == '\n') {
                p->line++;
                p->line_start = p->cursor + 1;
            }
            p->cursor++;
        }
        if (p->cursor + 1 < p->end && p->cursor[0] == '/' && p->cursor[1] == '/') {
            while (p->cursor < p->end && *p->cursor != '\n') p->cursor++;
            continue;
        }
        if (p->cursor < p->end && *p->cursor == '#') {
            while (p->cursor < p->end && *p->cursor != '\n') p->cursor++;
            continue;
        }
        if (p->cursor + 1 < p->end && p->cursor[0] == '/' && p->cursor[1] == '*') {
            p->cursor += 2;
            while (p->cursor + 1 < p->end && !(p->cursor[0] == '*' && p->cursor[1] == '/')) {
                if (*p->cursor == '\n') {
                    p->line++;
                    p->line_start = p->cursor + 1;
                }
                p->cursor++;
            }
            p->cursor = p->cursor + 2 <= p->end ? p->cursor + 2 : p->end;
            continue;
        }
        return;
    }
}

static int is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static int is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

void mil_lex_next(mil_lexer *p) {
    skip_space_and_comments(p);
    token *t = &p->tok;
    t->start = p->cursor;
    t->line = p->line;
    t->line_start = p->line_start;
    t->column = (int)(p->cursor - p->line_start) + 1;
    if (p->cursor >= p->end) {
        t->kind = T_EOF;
        t->length = 0;
        return;
    }
    char c = *p->cursor;
    const char *s = p->cursor;
    if (c == '-' && s + 1 < p->end && s[1] == '>') {
        t->kind = T_ARROW;
        p->cursor += 2;
    } else if (is_ident_start(c)) {
        while (p->cursor < p->end && is_ident_char(*p->cursor)) p->cursor++;
        t->kind = T_IDENT;
    } else if (isdigit((unsigned char)c) || ((c == '-' || c == '+' || c == '.') && s + 1 < p->end &&
                                             (isdigit((unsigned char)s[1]) || s[1] == '.' || isalpha((unsigned char)s[1])))) {
        /* Numbers: decimal, hex floats (0x1.8p-3), and signed words like -inf. */
        p->cursor++;
        while (p->cursor < p->end && (isalnum((unsigned char)*p->cursor) || *p->cursor == '.' ||
                                      ((*p->cursor == '-' || *p->cursor == '+') &&
                                       (p->cursor[-1] == 'e' || p->cursor[-1] == 'E' || p->cursor[-1] == 'p' || p->cursor[-1] == 'P'))))
            p->cursor++;
        t->kind = T_NUMBER;
    } else if (c == '"') {
        p->cursor++;
        while (p->cursor < p->end && *p->cursor != '"' && *p->cursor != '\n') {
            if (*p->cursor == '\\' && p->cursor + 1 < p->end) p->cursor++;
            p->cursor++;
        }
        if (p->cursor >= p->end || *p->cursor != '"') {
            t->length = (size_t)(p->cursor - s);
            t->kind = T_STRING;
            mil_lex_fail_at(p, t, "unterminated string");
            return;
        }
        p->cursor++;
        t->kind = T_STRING;
    } else {
        p->cursor++;
        t->kind = T_PUNCT;
    }
    t->length = (size_t)(p->cursor - s);
}

int mil_lex_is_punct(const mil_lexer *p, char c) { return p->tok.kind == T_PUNCT && p->tok.start[0] == c; }
int mil_lex_is_word(const mil_lexer *p, const char *word) {
    return p->tok.kind == T_IDENT && p->tok.length == strlen(word) && memcmp(p->tok.start, word, p->tok.length) == 0;
}

const char *mil_lex_describe(const token *t, char *buf, size_t size) {
    if (t->kind == T_EOF) snprintf(buf, size, "end of input");
    else snprintf(buf, size, "'%.*s'", (int)(t->length > 40 ? 40 : t->length), t->start);
    return buf;
}

int mil_lex_expect_punct(mil_lexer *p, char c, const char *context) {
    if (mil_lex_failed(p)) return 0;
    if (!mil_lex_is_punct(p, c)) {
        char found[64];
        mil_lex_fail_at(p, &p->tok, "expected '%c' %s, found %s", c, context, mil_lex_describe(&p->tok, found, sizeof found));
        return 0;
    }
    mil_lex_next(p);
    return 1;
}

int mil_lex_accept_punct(mil_lexer *p, char c) {
    if (mil_lex_failed(p) || !mil_lex_is_punct(p, c)) return 0;
    mil_lex_next(p);
    return 1;
}

int mil_lex_expect_ident(mil_lexer *p, char *buf, size_t size, const char *what) {
    if (mil_lex_failed(p)) return 0;
    if (p->tok.kind != T_IDENT) {
        char found[64];
        mil_lex_fail_at(p, &p->tok, "expected %s, found %s", what, mil_lex_describe(&p->tok, found, sizeof found));
        return 0;
    }
    if (p->tok.length >= size) {
        mil_lex_fail_at(p, &p->tok, "name is longer than %d characters", (int)size - 1);
        return 0;
    }
    memcpy(buf, p->tok.start, p->tok.length);
    buf[p->tok.length] = '\0';
    mil_lex_next(p);
    return 1;
}

