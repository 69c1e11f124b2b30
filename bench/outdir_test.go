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
