package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestEmbeddedDefaultRun(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"-duration", "300ms", "-clients", "2"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	s := out.String()
	if !strings.Contains(s, "embedded in-process Redis nodes") {
		t.Errorf("output does not say what it ran against:\n%s", s)
	}
	m := regexp.MustCompile(`acquired (\d+)`).FindStringSubmatch(s)
	if m == nil || m[1] == "0" {
		t.Errorf("no lock acquired:\n%s", s)
	}
	for _, row := range []string{"acquire", "release", "cycle"} {
		if !regexp.MustCompile(`(?m)^` + row + ` `).MatchString(s) {
			t.Errorf("no %s row:\n%s", row, s)
		}
	}
}

func TestFlagValidation(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "-clients 0"},
		{[]string{"-keys", "-1"}, "-keys -1"},
		{[]string{"-embedded", "0"}, "-embedded 0"},
		{[]string{"-ttl", "0s"}, "-ttl 0s"},
		{[]string{"-hold", "-1s"}, "-hold -1s"},
		{[]string{"-hold", "10s", "-ttl", "5s"}, "shorter than -ttl"},
		{[]string{"-duration", "0s"}, "-duration 0s"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), tt.args, &out, &errOut)
		if err == nil {
			t.Errorf("%v: no error", tt.args)
			continue
		}
		if !strings.Contains(err.Error()+errOut.String(), tt.want) {
			t.Errorf("%v: error %q, stderr %q; want %q", tt.args, err, errOut.String(), tt.want)
		}
	}
}
