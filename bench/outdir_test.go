package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckOutDir(t *testing.T) {
	write := func(t *testing.T, dir string, names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("missing", func(t *testing.T) {
		if err := CheckOutDir(filepath.Join(t.TempDir(), "new")); err != nil {
			t.Error(err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if err := CheckOutDir(t.TempDir()); err != nil {
			t.Error(err)
		}
	})
	t.Run("an earlier run's", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, OutputFiles()...)
		if err := CheckOutDir(dir); err != nil {
			t.Error(err)
		}
	})
	t.Run("someone's files", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "report.json", "notes.txt")
		err := CheckOutDir(dir)
		if err == nil || !strings.Contains(err.Error(), "notes.txt") || strings.Contains(err.Error(), "\n") {
			t.Errorf("CheckOutDir = %v; want one line naming notes.txt", err)
		}
	})
	t.Run("a subdirectory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "report.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := CheckOutDir(dir); err == nil {
			t.Error("CheckOutDir accepted a directory named report.json")
		}
	})
	t.Run("a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "f")
		write(t, filepath.Dir(f), "f")
		if err := CheckOutDir(f); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("CheckOutDir(file) = %v", err)
		}
	})
}

func TestCheckSuiteOutDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckSuiteOutDir(filepath.Join(dir, "new")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "burst"), 0o755)
	os.WriteFile(filepath.Join(dir, "burst", "report.json"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "index.html"), nil, 0o644)
	if err := CheckSuiteOutDir(dir); err != nil {
		t.Errorf("an earlier suite's directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "burst", "notes.txt"), nil, 0o644)
	if err := CheckSuiteOutDir(dir); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("a foreign file in a scenario's directory: %v", err)
	}
	os.Remove(filepath.Join(dir, "burst", "notes.txt"))
	os.MkdirAll(filepath.Join(dir, "thesis"), 0o755)
	if err := CheckSuiteOutDir(dir); err == nil || !strings.Contains(err.Error(), "thesis") {
		t.Errorf("a foreign directory: %v", err)
	}
}
