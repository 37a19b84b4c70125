package filter

// The CESQL parse tree is built as github.com/cloudevents/sdk-go/sql/v2 (v2.16.2) builds
// it — this file adapts its parser/parser.go and parser/expression_visitor.go, Copyright
// 2021 The CloudEvents Authors, Apache License 2.0 — with the sdk's own grammar and
// expression constructors, except LIKE: the sdk's matcher backtracks, costing the
// subject's length times the pattern's per event, so LIKE is likeExpression (like.go),
// and its pattern is bounded (MaxLikePattern). The sdk offers no hook for one operator,
// hence the copy; the TCK cases (tck_test.go) check that both agree.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/antlr/antlr4/runtime/Go/antlr"
	cesql "github.com/cloudevents/sdk-go/sql/v2"
	sqlerrors "github.com/cloudevents/sdk-go/sql/v2/errors"
	"github.com/cloudevents/sdk-go/sql/v2/expression"
	"github.com/cloudevents/sdk-go/sql/v2/gen"
	cesqlparser "github.com/cloudevents/sdk-go/sql/v2/parser"
	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// parseCESQL parses a CESQL expression as the sdk's parser.Parse does. Like it, it may
// panic on some malformed input; compileCESQL recovers.
func parseCESQL(input string) (cesql.Expression, error) {
	var is antlr.CharStream = antlr.NewInputStream(input)
	is = cesqlparser.NewCaseChangingStream(is, true)
	lexer := gen.NewCESQLParserLexer(is)
	stream := antlr.NewCommonTokenStream(lexer, antlr.TokenDefaultChannel)
	p := gen.NewCESQLParserParser(stream)
	p.RemoveErrorListeners()
	listener := &syntaxErrors{}
	p.AddErrorListener(listener)
	v := &visitor{}
	result := v.Visit(p.Cesql())
	err := sqlerrors.NewParseError(append(listener.errs, v.errs...))
	if result == nil {
		return nil, err
	}
	return result.(cesql.Expression), err
}

type syntaxErrors struct {
	antlr.DefaultErrorListener
	errs []error
}

func (d *syntaxErrors) SyntaxError(_ antlr.Recognizer, _ any, _, _ int, _ string, e antlr.RecognitionException) {
	d.errs = append(d.errs, fmt.Errorf("syntax error: %v", e.GetMessage()))
}

// visitor builds the expression tree of a parse tree.
type visitor struct {
	gen.BaseCESQLParserVisitor
	errs []error
}

func (v *visitor) Visit(tree antlr.ParseTree) any {
	switch t := tree.(type) {
	case *gen.CesqlContext, *gen.AtomExpressionContext, *gen.BooleanAtomContext, *gen.IntegerAtomContext,
		*gen.StringAtomContext, *gen.IdentifierAtomContext:
		return v.Visit(t.(antlr.RuleNode).GetChild(0).(antlr.ParseTree))
	case *gen.UnaryNumericExpressionContext:
		return expression.NewNegateExpression(v.expr(t.Expression()))
	case *gen.UnaryLogicExpressionContext:
		return expression.NewNotExpression(v.expr(t.Expression()))
	case *gen.BooleanLiteralContext:
		return expression.NewLiteralExpression(t.TRUE() != nil)
	case *gen.IntegerLiteralContext:
		n, err := strconv.ParseInt(t.GetText(), 10, 32)
		if err != nil {
			v.errs = append(v.errs, err)
		}
		return expression.NewLiteralExpression(int32(n))
	case *gen.StringLiteralContext:
		return expression.NewLiteralExpression(stringLiteral(t))
	case *gen.ExistsExpressionContext:
		return expression.NewExistsExpression(strings.ToLower(t.Identifier().GetText()))
	case *gen.InExpressionContext:
		left := v.expr(t.Expression())
		var set []cesql.Expression
		for _, e := range t.SetExpression().(*gen.SetExpressionContext).AllExpression() {
			set = append(set, v.expr(e))
		}
		if t.NOT() != nil {
			return expression.NewNotExpression(expression.NewInExpression(left, set))
		}
		return expression.NewInExpression(left, set)
	case *gen.IdentifierContext:
		return expression.NewIdentifierExpression(strings.ToLower(t.GetText()))
	case *gen.BinaryMultiplicativeExpressionContext:
		l, r := v.expr(t.Expression(0)), v.expr(t.Expression(1))
		switch {
		case t.STAR() != nil:
			return expression.NewMultiplicationExpression(l, r)
		case t.MODULE() != nil:
			return expression.NewModuleExpression(l, r)
		}
		return expression.NewDivisionExpression(l, r)
	case *gen.BinaryAdditiveExpressionContext:
		l, r := v.expr(t.Expression(0)), v.expr(t.Expression(1))
		if t.PLUS() != nil {
			return expression.NewSumExpression(l, r)
		}
		return expression.NewDifferenceExpression(l, r)
	case *gen.SubExpressionContext:
		return v.Visit(t.Expression())
	case *gen.BinaryLogicExpressionContext:
		l, r := v.expr(t.Expression(0)), v.expr(t.Expression(1))
		switch {
		case t.AND() != nil:
			return expression.NewAndExpression(l, r)
		case t.OR() != nil:
			return expression.NewOrExpression(l, r)
		}
		return expression.NewXorExpression(l, r)
	case *gen.BinaryComparisonExpressionContext:
		l, r := v.expr(t.Expression(0)), v.expr(t.Expression(1))
		switch {
		case t.LESS() != nil:
			return expression.NewLessExpression(l, r)
		case t.LESS_OR_EQUAL() != nil:
			return expression.NewLessOrEqualExpression(l, r)
		case t.GREATER() != nil:
			return expression.NewGreaterExpression(l, r)
		case t.GREATER_OR_EQUAL() != nil:
			return expression.NewGreaterOrEqualExpression(l, r)
		case t.EQUAL() != nil:
			return expression.NewEqualExpression(l, r)
		}
		return expression.NewNotEqualExpression(l, r)
	case *gen.LikeExpressionContext:
		return v.like(t)
	case *gen.FunctionInvocationExpressionContext:
		var args []cesql.Expression
		for _, e := range t.FunctionParameterList().(*gen.FunctionParameterListContext).AllExpression() {
			args = append(args, v.expr(e))
		}
		return expression.NewFunctionInvocationExpression(strings.ToUpper(t.FunctionIdentifier().GetText()), args)
	}
	return nil
}

// expr is the expression of a subtree; like the sdk's, it panics when there is none (a
// malformed tree), which compileCESQL reports as a parse error.
func (v *visitor) expr(tree antlr.ParseTree) cesql.Expression {
	return v.Visit(tree).(cesql.Expression)
}

func (v *visitor) like(t *gen.LikeExpressionContext) any {
	lit, ok := t.StringLiteral().(*gen.StringLiteralContext)
	if !ok || (lit.DQUOTED_STRING_LITERAL() == nil && lit.SQUOTED_STRING_LITERAL() == nil) {
		v.errs = append(v.errs, fmt.Errorf("failed to parse LIKE expression: the pattern was not a string literal"))
		return noop{}
	}
	pattern := stringLiteral(lit)
	if len(pattern) > MaxLikePattern {
		v.errs = append(v.errs, fmt.Errorf("LIKE pattern of %d bytes: at most %d (the bound on CESQL LIKE patterns)", len(pattern), MaxLikePattern))
		return noop{}
	}
	var e cesql.Expression = &likeExpression{child: v.expr(t.Expression()), pattern: compileLike(pattern)}
	if t.NOT() != nil {
		e = expression.NewNotExpression(e)
	}
	return e
}

// stringLiteral is the value of a quoted string literal.
func stringLiteral(t *gen.StringLiteralContext) string {
	if n := t.DQUOTED_STRING_LITERAL(); n != nil {
		s := n.GetText()
		return strings.ReplaceAll(s[1:len(s)-1], "\\\"", "\"")
	}
	s := t.SQUOTED_STRING_LITERAL().GetText()
	return strings.ReplaceAll(s[1:len(s)-1], "\\'", "'")
}

// noop stands for a subtree that failed to parse, so that the walk goes on and reports
// every error; the expression is discarded.
type noop struct{}

func (noop) Evaluate(cloudevents.Event) (any, error) { return 0, nil }
