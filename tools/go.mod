module github.com/troy-audit/troy/tools

go 1.26.8

require github.com/troy-audit/troy v0.0.0

replace github.com/troy-audit/troy => ../
