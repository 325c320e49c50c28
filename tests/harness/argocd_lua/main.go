// argocd-lua runs an Argo CD resource health check (a health.lua script) the way Argo CD does: in gopher-lua, with
// only the package, base and table libraries open, and the object, decoded from JSON, as the global `obj`.
//
//	argocd-lua SCRIPT < objects.jsonl     one JSON object per line in, one JSON result per line out:
//	                                      the table the script returns ({"status": ..., "message": ...}),
//	                                      or {"error": ...} when the script fails
//
// Test support for docs/gitops.md (tests/cluster/test_gitops_health.py); not part of Sextant.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	lua "github.com/yuin/gopher-lua"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: argocd-lua SCRIPT < objects.jsonl")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(in.Bytes(), &obj); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		result, err := run(string(script), obj)
		if err != nil {
			result = map[string]any{"error": err.Error()}
		}
		if err := out.Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(script string, obj map[string]any) (map[string]any, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", decode(L, obj))
	if err := L.DoString(script); err != nil {
		return nil, err
	}
	returned, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("the script returned %s, not a table", L.Get(-1).Type())
	}
	result := map[string]any{}
	returned.ForEach(func(k, v lua.LValue) { result[k.String()] = v.String() })
	return result, nil
}

// decode turns JSON into Lua values as Argo CD does: objects and arrays become tables (arrays 1-based), null nil.
func decode(L *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case map[string]any:
		t := L.CreateTable(0, len(v))
		for key, item := range v {
			t.RawSetString(key, decode(L, item))
		}
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(decode(L, item))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	}
	return lua.LNil
}
