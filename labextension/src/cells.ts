/**
 * What every code cell's editor gets: the mtsql language while its first line is the magic's (above
 * the kernel's language, so it switches back when that line changes), and the underline of an error
 * the kernel placed in it, with its message on hover, until the text changes or the cell runs again.
 */
import { Compartment, EditorState, Extension, Prec, StateEffect, StateField, Text } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, hoverTooltip } from '@codemirror/view';

import { isMtsql, mtsql } from './language';

/** Where the kernel says an error lies in the cell (1-based line and column), and what it says. */
export interface Diagnostic {
  line: number;
  column: number;
  message: string;
}

const placeError = StateEffect.define<Diagnostic | null>();

/** The error's place: the word (or character) there; at a line's end, the character before it. */
function span(doc: Text, at: Diagnostic): { from: number; to: number } | null {
  if (!(at.line >= 1 && at.line <= doc.lines && at.column >= 1)) {
    return null;
  }
  let line = doc.line(at.line);
  while (line.length === 0 && line.number > 1) {
    line = doc.line(line.number - 1);
  }
  const from = Math.min(line.from + at.column - 1, line.to);
  const word = /^(?:\w+|\S)/.exec(doc.sliceString(from, line.to));
  if (word) {
    return { from, to: from + word[0].length };
  }
  return line.length > 0 ? { from: line.to - 1, to: line.to } : null;
}

const errors = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(marks, transaction) {
    for (const effect of transaction.effects) {
      if (effect.is(placeError)) {
        const at = effect.value && span(transaction.state.doc, effect.value);
        return at && effect.value
          ? Decoration.set(
              Decoration.mark({ class: 'cm-mtsql-error', message: effect.value.message }).range(
                at.from,
                at.to
              )
            )
          : Decoration.none;
      }
    }
    return transaction.docChanged ? Decoration.none : marks;
  },
  provide: field => EditorView.decorations.from(field)
});

const message = hoverTooltip((view, pos) => {
  let found = null;
  view.state.field(errors).between(pos, pos, (from, to, mark) => {
    found = { pos: from, end: to, above: true, create: () => tooltip(mark.spec.message) };
  });
  return found;
});

function tooltip(text: string): { dom: HTMLElement } {
  const dom = document.createElement('div');
  dom.className = 'cm-mtsql-error-message';
  dom.textContent = text;
  return { dom };
}

/** Underline the error in the cell's editor, or take the underline away (null). */
export function showError(view: EditorView, at: Diagnostic | null): void {
  view.dispatch({ effects: placeError.of(at) });
}

const sql = new Compartment();
const SQL: Extension = Prec.highest(mtsql);
const NONE: Extension = [];

/** The language follows the first line: a change that makes it the magic's, or no longer, switches it. */
const following = EditorState.transactionExtender.of(transaction => {
  const wanted = transaction.docChanged && isMtsql(transaction.newDoc.line(1).text) ? SQL : NONE;
  if (!transaction.docChanged || sql.get(transaction.startState) === wanted) {
    return null;
  }
  return { effects: sql.reconfigure(wanted) };
});

/** The extension of a code cell's editor whose text is `source` as it is created. */
export function mtsqlCell(source: string): Extension {
  return [sql.of(isMtsql(source.split('\n', 1)[0]) ? SQL : NONE), following, errors, message];
}
