/* base/text.c: printf-style appends across many buffer growths give the same text as
 * snprintf into one large buffer; byte appends keep embedded NULs and the length counts them;
 * a reserve gives exactly the room asked and appends within it do not move the buffer. */
#include <stdio.h>
#include <string.h>

#include "ane_core/base/text.h"
#include "check.h"

int main(void) {
    static char reference[1 << 20];
    size_t used = 0;
    ane_text text = { 0 };
    for (int i = 0; i < 20000; i++) {
        ane_text_append(&text, "%%%d:%s/%.3f;", i, i % 3 ? "fp16" : "tensor<fp32, [1, 768, 1, 256]>", i / 7.0);
        used += (size_t)snprintf(reference + used, sizeof reference - used, "%%%d:%s/%.3f;", i,
                                 i % 3 ? "fp16" : "tensor<fp32, [1, 768, 1, 256]>", i / 7.0);
    }
    CHECK(!text.failed, "no allocation failed");
    CHECK(text.length == used, "length %zu, the reference %zu", text.length, used);
    CHECK(text.data && memcmp(text.data, reference, used) == 0 && text.data[text.length] == '\0',
          "the text equals snprintf's, NUL-terminated");
    ane_text_free(&text);
    CHECK(text.data == NULL && text.length == 0, "a freed text is empty");

    const char bytes[] = { 'a', 0, 'b', 0, 0, 'c' };
    ane_text_append_bytes(&text, bytes, sizeof bytes);
    ane_text_append(&text, "%s", "");
    CHECK(text.length == sizeof bytes && memcmp(text.data, bytes, sizeof bytes) == 0, "embedded NULs are kept");
    ane_text_free(&text);

    /* reserve: room for what is asked (grown to exactly that when it is missing); appends
     * within it keep the buffer */
    ane_text_append(&text, "%s", "head:");
    ane_text_reserve(&text, 8000);
    const char *before = text.data;
    CHECK(text.capacity == 5 + 8000 + 1, "capacity %zu after reserving 8000 bytes past 5", text.capacity);
    for (int i = 0; i < 1000; i++) ane_text_append_bytes(&text, "xyz", 3);
    CHECK(text.data == before, "appends within the reserved room do not move the buffer");
    CHECK(text.length == 3005 && memcmp(text.data, "head:xyzxyz", 11) == 0 && text.data[3005] == '\0',
          "the reserved text holds what was appended");
    ane_text_reserve(&text, 10); /* within the room: nothing changes */
    CHECK(text.capacity == 8006 && text.data == before, "a reserve within the room leaves the buffer");
    ane_text_reserve(&text, 6000); /* past it: grows to exactly what is asked */
    CHECK(text.capacity == 3005 + 6000 + 1 && memcmp(text.data, "head:xyz", 8) == 0, "a second reserve keeps the text");
    ane_text_free(&text);
    ane_text_reserve(&text, 100); /* on an empty text: an empty string with room */
    CHECK(text.data && text.data[0] == '\0' && text.length == 0 && text.capacity == 101, "reserve on an empty text");
    ane_text_free(&text);
    return check_summary("text");
}
