package commerce_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Small assertion helpers: the must* forms stop the test, the others
// record a failure and go on.

func msgOf(msg []any) string {
	if len(msg) == 0 {
		return ""
	}
	if f, ok := msg[0].(string); ok {
		return ": " + fmt.Sprintf(f, msg[1:]...)
	}
	return ": " + fmt.Sprint(msg...)
}

func noErr(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error%s: %v", msgOf(msg), err)
	}
}

func mustErr(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error%s", msgOf(msg))
	}
}

func errIs(t testing.TB, err, target error, msg ...any) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v is not %v%s", err, target, msgOf(msg))
		return false
	}
	return true
}

func mustErrIs(t testing.TB, err, target error, msg ...any) {
	t.Helper()
	if !errIs(t, err, target, msg...) {
		t.FailNow()
	}
}

func equal(t testing.TB, want, got any, msg ...any) bool {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("want %#v, got %#v%s", want, got, msgOf(msg))
		return false
	}
	return true
}

func mustEqual(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	if !equal(t, want, got, msg...) {
		t.FailNow()
	}
}

func notEqual(t testing.TB, a, b any, msg ...any) {
	t.Helper()
	if reflect.DeepEqual(a, b) {
		t.Errorf("both are %#v%s", a, msgOf(msg))
	}
}

func isTrue(t testing.TB, cond bool, msg ...any) bool {
	t.Helper()
	if !cond {
		t.Errorf("condition is false%s", msgOf(msg))
	}
	return cond
}

func mustTrue(t testing.TB, cond bool, msg ...any) {
	t.Helper()
	if !isTrue(t, cond, msg...) {
		t.FailNow()
	}
}

func isFalse(t testing.TB, cond bool, msg ...any) {
	t.Helper()
	if cond {
		t.Errorf("condition is true%s", msgOf(msg))
	}
}

func mustFalse(t testing.TB, cond bool, msg ...any) {
	t.Helper()
	if cond {
		t.Fatalf("condition is true%s", msgOf(msg))
	}
}

func isZero(t testing.TB, v any, msg ...any) {
	t.Helper()
	if v != nil && !reflect.ValueOf(v).IsZero() {
		t.Errorf("want zero, got %#v%s", v, msgOf(msg))
	}
}

func isNil(t testing.TB, v any, msg ...any) {
	t.Helper()
	if v == nil {
		return
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return
		}
	}
	t.Errorf("want nil, got %#v%s", v, msgOf(msg))
}

func hasLen(t testing.TB, v any, n int, msg ...any) bool {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		t.Errorf("want length %d, got %d (%#v)%s", n, l, v, msgOf(msg))
		return false
	}
	return true
}

func mustLen(t testing.TB, v any, n int, msg ...any) {
	t.Helper()
	if !hasLen(t, v, n, msg...) {
		t.FailNow()
	}
}

func contains(t testing.TB, s, sub string, msg ...any) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%q does not contain %q%s", s, sub, msgOf(msg))
	}
}

func jsonEq(t testing.TB, want, got string) {
	t.Helper()
	var w, g any
	noErr(t, json.Unmarshal([]byte(want), &w), "want is JSON")
	noErr(t, json.Unmarshal([]byte(got), &g), "got is JSON")
	if !reflect.DeepEqual(w, g) {
		t.Errorf("JSON differs:\nwant %s\ngot  %s", want, got)
	}
}

func panics(t testing.TB, f func(), msg ...any) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("expected a panic%s", msgOf(msg))
		}
	}()
	f()
}
